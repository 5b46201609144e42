"""GPT-2's model sizes, as the trainer's -e descriptors name them (plain Python: scripts can check
their arguments against it before importing PyTorch)."""

CONFIGS = {  # descriptor -> (L, NH, C, maxT); V is always GPT-2's 50257
    "d12": (12, 12, 768, 1024), "d24": (24, 16, 1024, 1024),
    "d36": (36, 20, 1280, 1024), "d48": (48, 25, 1600, 1024),
    "tiny": (2, 4, 64, 64),
}


def make_config(name):
    L, NH, C, maxT = CONFIGS[name]
    return dict(L=L, NH=NH, C=C, maxT=maxT, V=50257)
