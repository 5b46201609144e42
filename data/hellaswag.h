// data/hellaswag.h: data/tokenize --hellaswag's reading of one JSON Lines example (choice_example),
// in a header of its own so that dev/fuzz/fuzz_hellaswag_jsonl.cpp can feed it too.
#pragma once
#include "bpe.h"
#include "corpus.h"
#include "../llmc/choices.h"

// One line of a HellaSwag-style JSON Lines file as an example: "ctx", K "endings", "label".
// *K is set by the first example and held for the rest. false + "FILE:LINE: why" on a bad line.
inline bool choice_example(const Document& doc, Gpt2Encoder& enc, int* K, ChoiceExample* x, std::string* err) {
    nlohmann::json j;
    if (!parse_json_line(doc, &j, err)) return false;
    auto bad = [&](const std::string& why) { *err = doc.origin + ": " + why; return false; };
    if (!j.is_object()) return bad("not a JSON object");
    auto ctx = j.find("ctx"), endings = j.find("endings"), label = j.find("label");
    if (ctx == j.end() || !ctx->is_string()) return bad("no string field \"ctx\"");
    if (endings == j.end() || !endings->is_array() || endings->empty()) return bad("no array field \"endings\"");
    for (const auto& e : *endings) if (!e.is_string()) return bad("an ending that is not a string");
    long long lab = -1;
    if (label != j.end() && label->is_number_integer()) lab = label->get<long long>();
    else if (label != j.end() && label->is_string()) {
        const std::string t = label->get<std::string>();
        if (!t.empty() && t.size() < 19 && t.find_first_not_of("0123456789") == std::string::npos) lab = std::stoll(t);
    }
    if (*K == 0) {
        if (endings->size() < 2 || endings->size() > (size_t)CHOICES_MAX_K)
            return bad(std::to_string(endings->size()) + " endings (2.." + std::to_string(CHOICES_MAX_K) + ")");
        *K = (int)endings->size();
    }
    if (endings->size() != (size_t)*K)
        return bad(std::to_string(endings->size()) + " endings where the first example has " + std::to_string(*K));
    if (lab < 0) return bad("no field \"label\" holding a whole number >= 0");
    std::vector<int> ids;
    if (!enc.encode(ctx->get<std::string>(), &ids, err, doc.origin)) return false;
    x->context.assign(ids.begin(), ids.end());
    x->endings.clear();
    for (const auto& e : *endings) {
        ids.clear();
        if (!enc.encode(" " + e.get<std::string>(), &ids, err, doc.origin)) return false;
        x->endings.emplace_back(ids.begin(), ids.end());
    }
    if (lab >= *K) return bad("label " + std::to_string(lab) + " is not in 0.." + std::to_string(*K - 1));
    x->label = (int)lab;
    const std::string problem = choice_example_problem(*x, *K);
    return problem.empty() || bad(problem);
}
