// The persistent attention kernels' schedule (llmc/attention_schedule.h): for many grids and
// problem sizes every work item is computed by exactly one CTA; both item orders map items one to
// one onto (head, tile); and at GPT-2's shapes no CTA gets more than 5 % above the mean work.
#include "llmc/attention_schedule.h"
#include "dev/unit/check.h"
#include <algorithm>
#include <vector>

using namespace attn_sched;

// How often each item is visited when G CTAs walk the snake over `items` items.
static bool covers_once(int items, int G) {
    std::vector<int> seen(items, 0);
    for (int c = 0; c < G; c++)
        for (int w = c; w < items; w = next_item(w, c, G)) seen[w]++;
    return std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; });
}

int main() {
    bool all = true;
    int worst_items = -1, worst_G = -1;
    for (int items : {1, 2, 7, 8, 96, 131, 132, 133, 263, 264, 265, 768, 1000, 1536, 6144})
        for (int G = 1; G <= 300; G++)
            if (!covers_once(items, G)) { all = false; worst_items = items, worst_G = G; }
    check_report(all, "every item exactly once, items 1..6144, grids 1..300",
                 "items " + std::to_string(worst_items) + ", grid " + std::to_string(worst_G));

    for (int BH : {1, 12, 96, 768})
        for (int ntiles : {1, 8, 16, 17, 32, 128}) {
            std::vector<int> seen(BH * ntiles, 0);
            bool in_range = true;
            for (int w = 0; w < BH * ntiles; w++) {
                const int h = item_head(w, BH, ntiles), r = item_rank(w, BH, ntiles);
                in_range &= h >= 0 && h < BH && r >= 0 && r < ntiles;
                if (in_range) seen[h * ntiles + r]++;
            }
            const bool ok = in_range && std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; });
            check_report(ok, "items <-> (head, tile) one to one, BH=" + std::to_string(BH) + " tiles=" + std::to_string(ntiles) +
                             (ntiles <= HEAD_MAJOR_MAX_TILES ? " (head-major)" : " (rank-major)"));
        }

    // Forward work of an item of rank r: nt - r key tiles. 132 SMs (H100/H200), NH = 12.
    struct Shape { int B, T; } shapes[] = {{64, 1024}, {8, 1024}, {16, 2048}, {4, 4096}, {1, 16384}};
    for (Shape s : shapes) {
        const int nt = (s.T + 127) / 128, BH = s.B * 12, items = BH * nt, G = std::min(items, 132);
        std::vector<long> load(G, 0);
        long total = 0;
        for (int c = 0; c < G; c++)
            for (int w = c; w < items; w = next_item(w, c, G)) load[c] += nt - item_rank(w, BH, nt);
        for (long l : load) total += l;
        const double ratio = *std::max_element(load.begin(), load.end()) / ((double)total / G);
        char why[64];
        snprintf(why, sizeof why, "busiest CTA %.3f x the mean", ratio);
        check_report(ratio <= 1.05, "balanced within 5 %: B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) + " (" + why + ")",
                     "more than 1.05");
    }
    return check_finish();
}
