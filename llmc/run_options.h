// The options of a run (the command line, and on --resume the run's own): what configure()
// (llmc/run_setup.cuh, the first thing train_gpt2.cu's main calls) asks before anything else.
// Host-only.
#pragma once
#include <numeric>
#include <string>
#include <utility>
#include <vector>
#include "checkpoint.h"
#include "dataloader.h"
#include "logger.h"        // file_exists, read_text_file
#include "train_config.h"

// --resume, before anything else: the options of the run being continued, merged with the command
// line (llmc/train_config.h, resume_config). They come from the newest complete checkpoint
// (after checking that this build and GPU count can continue it), or, before the first one, from
// <out>/options.txt, which a run writes when it starts; with neither (a new run), the command
// line's. The model is the checkpoint's own model.bin (the weights the run continues from),
// whatever file the run started from. Every rank reads the same files (--out must be on a
// filesystem they share), so all ranks agree.
inline bool resume_options(TrainConfig* tc, int world, int precision_code, int argc, const char* const* argv, std::string* note,
                           std::string* err) {
    const std::string given_model = tc->model;
    std::vector<std::pair<long long, std::string>> found;
    if (tc->out.empty()) return check_train_config(tc, world, err);   // which refuses --resume without --out
    if (!ckpt_detail::list_complete(tc->out, &found, err)) return false;
    std::string dir, path = tc->out + "/options.txt", text;
    TrainState st{};
    if (!found.empty()) {
        dir = found.back().second;
        path = dir + "/options.txt";
        if (!checkpoint_read_state(dir, &st, err) || !checkpoint_fits_run(dir, st, precision_code, world, err)) return false;
    }
    if (!file_exists(path)) {
        if (!found.empty()) *note = "note: " + dir + " holds no options.txt (an older checkpoint): the options are this command line's";
        if (!check_train_config(tc, world, err)) return false;
    } else if (!read_text_file(path, &text, err)) {
        return false;
    } else if (text.empty()) {   // a run writes every option there: an empty file is a damaged one
        *err = path + ": empty (damaged?): it should hold the run's options, one per line";
        return false;
    } else if (!resume_config(tc, text, path, argc, argv, world, note, err, found.empty() ? -1 : (int)st.step)) {
        return false;
    }
    if (!found.empty()) {
        // the loader position is the checkpoint's: the shards must be those it was taken in (when
        // --train matches nothing, opening the loader says so later)
        std::vector<std::string> files;
        std::vector<size_t> tokens;
        std::string none;
        if (dataloader_shards(tc->train, &files, &tokens, &none) &&
            !checkpoint_same_data(dir, st, files.size(), std::accumulate(tokens.begin(), tokens.end(), (size_t)0), err))
            return false;
        if (given_model != TrainConfig().model)   // -e was given
            *note += std::string(note->empty() ? "" : "\n") + "note: -e " + given_model + " not used: a resumed run continues from its checkpoint's model";
        tc->start_model = tc->model;   // (options.txt keeps it: a resume before any checkpoint starts from it)
        tc->model = dir + "/model.bin";
        if (!file_exists(tc->model)) {   // list_complete saw its DONE marker: damaged since
            *err = tc->model + ": missing from a complete checkpoint (damaged?): move " + dir + " away to resume from the one before";
            return false;
        }
    }
    return true;
}

// The run's options: the command line's, or on --resume the run's own merged with it. false + one
// line in *err on a problem; *help for --help; *note: lines for rank 0 to print.
inline bool configure_run(TrainConfig* tc, int world, int precision_code, int argc, const char* const* argv, bool* help,
                          std::string* note, std::string* err) {
    if (!options_parse(train_options(tc), argc, argv, help, err)) return false;
    if (*help) return true;
    if (!check_dependent_options(*tc, argc, argv, err)) return false;
    if (tc->resume && !tc->bench) return resume_options(tc, world, precision_code, argc, argv, note, err);
    return check_train_config(tc, world, err);
}
