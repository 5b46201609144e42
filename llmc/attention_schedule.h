// The work-item schedule of the persistent attention kernels (llmc/flash_attention_wgmma*.cuh):
// which CTA computes which 128-row item, in what order. Plain C++ (host and device), so that a CPU
// unit test (dev/unit/test_attention_schedule.cpp) checks that every item is computed exactly once
// for any grid and that the load stays balanced.
//
// Items: w = 0 .. BH*ntiles-1 (BH = B*NH heads, ntiles = 128-row tiles per head) is the tile of
// rank item_rank(w) (0 = the longest: the last query tile for the forward and dQ, the first key
// tile for dK/dV) of head item_head(w): the longest tiles first, so the short ones fill the tail.
// The G CTAs (one per SM) take them in rounds of G, snaking: CTA c takes item rG + c in even rounds
// r and rG + G-1-c in odd ones, so the CTA that took a long item in one round takes a short one in
// the next (a static schedule that balances the load like a dynamic one without a shared counter).
// Every item is computed exactly as by a one-item CTA (same products, same order): the results do
// not depend on the grid size or the schedule.
//
// Two orders of the items. Rank-major (w = rank * BH + head: every CTA's items of one round are
// equally long) for long sequences. Head-major (w = head * ntiles + rank: a head's tiles run at the
// same time, so its K and V come from DRAM once and then from L2) for heads of up to 16 tiles
// (T <= 2048): at T=1024 an item is short and waits on its loads. The snake still balances: with 8
// tiles and 132 CTAs, CTA c gets rank c%8 in even rounds and 7 - c%8 in odd ones (equal pairs).
// Measured on an H200 (bf16, NH=12, B*T = 64K, TFLOP/s, rank-major -> head-major): T=1024 forward
// 271 -> 286, dQ 307 -> 312, dK/dV 320 -> 325; T=2048 313 -> 333, 344 -> 356, 355 -> 375; but
// T=4096 346 -> 317 and T=16384 402 -> 257 (with ranks 0..127 the rounds no longer pair up).
#pragma once

#if defined(__CUDACC__)
#define ATTN_SCHED_HD __host__ __device__
#else
#define ATTN_SCHED_HD
#endif

namespace attn_sched {

constexpr int HEAD_MAJOR_MAX_TILES = 16;
ATTN_SCHED_HD inline int item_head(int w, int BH, int ntiles) { return ntiles <= HEAD_MAJOR_MAX_TILES ? w / ntiles : w % BH; }
ATTN_SCHED_HD inline int item_rank(int w, int BH, int ntiles) { return ntiles <= HEAD_MAJOR_MAX_TILES ? w % ntiles : w / BH; }
// CTA c's item after w, in a grid of G CTAs (its first item is c).
ATTN_SCHED_HD inline int next_item(int w, int c, int G) {
    const int r = w / G + 1;
    return r * G + ((r & 1) ? G - 1 - c : c);
}

}  // namespace attn_sched
