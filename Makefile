# GPT-2 trainer: CUDA + cuBLASLt (+ NCCL, MPI when found).
#
#   make                         all: the trainer, test_gpt2cu, data/tokenize, dev/interconnect, dev/power_probe
#   make train_gpt2cu            the trainer (PRECISION=FP16 by default; BF16, FP32)
#   make test_gpt2cu             the whole-model check against the PyTorch reference
#   make data                    the tokenizer and the tinyshakespeare shards
#   make test                    CPU unit tests, plus GPU tests when a GPU is visible
#   make cuda-checks             the per-kernel checks in dev/cuda
#   make unit                    the CPU unit-test programs only (build/unit/; make test builds and runs them)
#   make info                    the settings and what was found (NCCL, MPI)
#   make clean                   the build outputs (not dev_data)
#
# Variables you may set: PRECISION, GPU_ARCH (e.g. 90, 80), NO_MPI=1, NO_NCCL=1, SANITIZE=1, CI=true,
# NVCC, NCCL_INCLUDE/NCCL_LIB, MPI_INCLUDE/MPI_LIB, PCRE2_CFLAGS/PCRE2_LIBS, EXTRA_FLAGS (more nvcc
# flags for an experiment's build), TINYSHAKESPEARE (make data's text, and the tokenizer tests').

# a plain `make` builds `all` (the first rule below would otherwise be the default: FORCE, nothing)
.DEFAULT_GOAL := all

NVCC       ?= nvcc
CXX        ?= g++
PRECISION  ?= FP16
SHARED_DIR ?= ../shared

# --- GPU architecture: the visible GPU's compute capability, else 90 (never probed when CI=true).
# Only digits are taken from nvidia-smi: without a working driver it prints its error on stdout
# ("NVIDIA-SMI has failed ...", "Failed to initialize NVML: Driver/library version mismatch"),
# which must not become the architecture. Probed once (:=), not at each use of GPU_ARCH.
ifeq ($(CI),true)
  GPU_ARCH ?= 90
else ifeq ($(origin GPU_ARCH),undefined)
  GPU_ARCH := $(shell nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d '.[:space:]' | grep -x '[0-9][0-9]*')
endif
ifeq ($(strip $(GPU_ARCH)),)
  override GPU_ARCH := 90
endif
# one line here, instead of nvcc's "Unsupported gpu architecture" once per target (or a recipe
# broken by a quote); digits only, as 90 means sm_90a with the wgmma kernels below
no_digits = $(subst 0,,$(subst 1,,$(subst 2,,$(subst 3,,$(subst 4,,$(subst 5,,$(subst 6,,$(subst 7,,$(subst 8,,$(subst 9,,$(1)))))))))))
ifneq ($(words $(GPU_ARCH))$(call no_digits,$(GPU_ARCH)),1)
  $(error GPU_ARCH must be a compute capability without the dot (90, 80, 89, ...: nvidia-smi --query-gpu=compute_cap), not '$(GPU_ARCH)')
endif
# sm_90a unlocks wgmma/setmaxnreg; code built for it runs only on Hopper, which is what 90 means here.
# USE_WGMMA: attention (forward, dQ, dK/dV) then runs on wgmma (llmc/flash_attention_wgmma*.cuh).
ifeq ($(GPU_ARCH),90)
  GENCODE := -gencode arch=compute_90a,code=sm_90a
  ARCH_DEFS := -DUSE_WGMMA
else
  GENCODE := -gencode arch=compute_$(GPU_ARCH),code=sm_$(GPU_ARCH)
endif

# exactly one of them: a list ("FP16 BF16") would pass a filter and reach nvcc as a file name
ifneq ($(words $(PRECISION))$(filter-out FP16 BF16 FP32,$(PRECISION)),1)
  $(error PRECISION must be FP16, BF16 or FP32, not '$(PRECISION)')
endif

CUDA_HOME  ?= $(patsubst %/bin/nvcc,%,$(shell command -v $(NVCC) 2>/dev/null))
NVCC_FLAGS  = -O3 --use_fast_math -std=c++17 $(GENCODE) $(ARCH_DEFS) -lineinfo \
              -Xcompiler -Wall -Xcompiler -Wno-unknown-pragmas --expt-relaxed-constexpr \
              -DENABLE_$(PRECISION) $(EXTRA_FLAGS)
NVCC_LIBS   = -lcublas -lcublasLt

# --- NCCL: multi-GPU support is compiled in when nccl.h is found
ifneq ($(NO_NCCL),1)
  NCCL_INCLUDE ?= $(firstword $(foreach d,/usr/include $(CUDA_HOME)/include /usr/local/include,$(if $(wildcard $(d)/nccl.h),$(d))))
  ifneq ($(NCCL_INCLUDE),)
    NVCC_FLAGS += -DUSE_NCCL -I$(NCCL_INCLUDE)
    NVCC_LIBS  += $(if $(NCCL_LIB),-L$(NCCL_LIB)) -lnccl
    FOUND += NCCL
  endif
endif
# --- MPI (OpenMPI at the Debian/Ubuntu paths, or wherever MPI_INCLUDE/MPI_LIB point)
ifneq ($(NO_MPI),1)
  MPI_INCLUDE ?= $(firstword $(foreach d,/usr/lib/x86_64-linux-gnu/openmpi/include /usr/lib/aarch64-linux-gnu/openmpi/include /usr/include/openmpi /usr/local/include,$(if $(wildcard $(d)/mpi.h),$(d))))
  MPI_LIB     ?= $(firstword $(foreach d,/usr/lib/x86_64-linux-gnu/openmpi/lib /usr/lib/aarch64-linux-gnu/openmpi/lib /usr/local/lib,$(if $(wildcard $(d)/libmpi.so),$(d))))
  ifneq ($(and $(MPI_INCLUDE),$(MPI_LIB)),)
    NVCC_FLAGS += -DUSE_MPI -I$(MPI_INCLUDE)
    NVCC_LIBS  += -L$(MPI_LIB) -lmpi
    FOUND += MPI
  endif
endif

# --- host-only code (tokenizer, unit tests): plain C++
CXXFLAGS    ?= -O2 -std=c++17 -Wall -Wextra
PCRE2_CFLAGS ?= $(shell pkg-config --cflags libpcre2-8 2>/dev/null)
PCRE2_LIBS   ?= $(shell pkg-config --libs libpcre2-8 2>/dev/null || echo -lpcre2-8)

# --- SANITIZE=1: every program's host code under AddressSanitizer and UBSan (out-of-bounds, use
# after free, leaks, undefined behaviour; a finding prints its stack and fails the program). The
# GPU code is unchanged: compute-sanitizer checks that (dev/device/sanitize.sh). nvcc splits
# -Xcompiler's value at commas, hence one -Xcompiler per flag; the ASan runtime links first.
# override: a CXXFLAGS given on make's command line would otherwise drop the sanitizers silently.
ifeq ($(SANITIZE),1)
  override CXXFLAGS += -g -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
  NVCC_FLAGS += -g $(foreach f,-fsanitize=address -fsanitize=undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer,-Xcompiler $(f))
  NVCC_LIBS  := -lasan -lubsan $(NVCC_LIBS)
endif

# --- every target depends on its compiler command too: another PRECISION, GPU_ARCH, NO_MPI,
# SANITIZE, ... rebuilds it (instead of "up to date" with a binary of the old settings). A stamp's
# recipe runs whenever a target that needs it is considered, and rewrites the file only when the
# command changed (a build of other targets, such as make data, leaves the nvcc stamp alone).
NVCC_STAMP := build/nvcc_command.txt
CXX_STAMP  := build/cxx_command.txt
.PHONY: FORCE
FORCE:
$(NVCC_STAMP): export CMD_TEXT := $(NVCC) $(NVCC_FLAGS) $(NVCC_LIBS)
$(CXX_STAMP):  export CMD_TEXT := $(CXX) $(CXXFLAGS) $(PCRE2_CFLAGS) $(PCRE2_LIBS)
$(NVCC_STAMP) $(CXX_STAMP): FORCE
	@mkdir -p $(@D) && { printf '%s\n' "$$CMD_TEXT" | cmp -s - $@ || printf '%s\n' "$$CMD_TEXT" > $@; }

LLMC_HEADERS := $(wildcard llmc/*.h llmc/*.cuh)
UNIT_SRCS    := $(wildcard dev/unit/test_*.cpp)
# host code of the CUDA headers (no CUDA call: they run without a GPU), built by nvcc
UNIT_CU_SRCS := $(wildcard dev/unit/test_*.cu)
UNIT_BINS    := $(patsubst dev/unit/%.cpp,build/unit/%,$(UNIT_SRCS)) $(patsubst dev/unit/%.cu,build/unit/%,$(UNIT_CU_SRCS))
CUDA_CHECKS  := $(patsubst %.cu,%_check,$(wildcard dev/cuda/*.cu))

.PHONY: all data test unit cuda-checks clean info
all: train_gpt2cu test_gpt2cu data/tokenize dev/interconnect dev/power_probe

info:
	@echo "PRECISION=$(PRECISION) GPU_ARCH=$(GPU_ARCH) found: $(or $(FOUND),nothing optional)"

train_gpt2cu: train_gpt2.cu $(LLMC_HEADERS) $(NVCC_STAMP)
	$(NVCC) $(NVCC_FLAGS) $< $(NVCC_LIBS) -o $@

test_gpt2cu: test_gpt2.cu $(LLMC_HEADERS) $(NVCC_STAMP)
	$(NVCC) $(NVCC_FLAGS) $< $(NVCC_LIBS) -o $@

dev/cuda/%_check: dev/cuda/%.cu $(LLMC_HEADERS) $(wildcard dev/cuda/*.cuh) $(NVCC_STAMP)
	$(NVCC) $(NVCC_FLAGS) $< $(NVCC_LIBS) -o $@

cuda-checks: $(CUDA_CHECKS)

dev/interconnect: dev/interconnect.cu $(LLMC_HEADERS) $(NVCC_STAMP)
	$(NVCC) $(NVCC_FLAGS) $< $(NVCC_LIBS) -o $@

dev/power_probe: dev/power_probe.cu llmc/common.cuh $(NVCC_STAMP)
	$(NVCC) $(NVCC_FLAGS) $< $(NVCC_LIBS) -o $@

data/tokenize: data/tokenize.cpp $(wildcard data/*.h) llmc/tokenizer.h llmc/shards.h llmc/choices.h llmc/options.h $(CXX_STAMP)
	$(CXX) $(CXXFLAGS) $(PCRE2_CFLAGS) $< $(PCRE2_LIBS) -pthread -o $@

build/unit/%: dev/unit/%.cpp dev/unit/check.h $(LLMC_HEADERS) $(wildcard data/*.h) $(CXX_STAMP)
	@mkdir -p build/unit
	$(CXX) $(CXXFLAGS) $(PCRE2_CFLAGS) -I. $< $(PCRE2_LIBS) -lpthread -o $@

build/unit/%: dev/unit/%.cu dev/unit/check.h $(LLMC_HEADERS) $(NVCC_STAMP)
	@mkdir -p build/unit
	$(NVCC) $(NVCC_FLAGS) -I. $< $(NVCC_LIBS) -o $@

unit: $(UNIT_BINS)

# The default dataset: tinyshakespeare tokenized into dev_data/tinyshakespeare_{train,val}.bin
TINYSHAKESPEARE ?= $(SHARED_DIR)/data/tinyshakespeare.txt
data: data/tokenize
	@mkdir -p dev_data
	./data/tokenize $(TINYSHAKESPEARE) -o dev_data/tinyshakespeare
	./data/tokenize --export-decoder dev_data/gpt2_tokenizer.bin

# CPU unit tests always; GPU tests (test_gpt2cu, dev/cuda checks) only where a GPU is visible
# (then built first). The tokenizer tests read $(TINYSHAKESPEARE) and the vocabulary (GPT2_VOCAB_DIR).
# (nvidia-smi's exit status, as dev/run_tests.sh reads it: without a driver it prints an error on stdout)
GPU_VISIBLE := $(if $(filter true,$(CI)),,$(shell nvidia-smi -L >/dev/null 2>&1 && echo yes))
test: $(UNIT_BINS) data/tokenize train_gpt2cu $(if $(GPU_VISIBLE),test_gpt2cu cuda-checks)
	@PRECISION=$(PRECISION) TINYSHAKESPEARE="$(TINYSHAKESPEARE)" bash dev/run_tests.sh $(UNIT_BINS)

clean:
	rm -rf build train_gpt2cu test_gpt2cu data/tokenize dev/interconnect dev/power_probe $(CUDA_CHECKS)
