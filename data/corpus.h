// data/corpus.h: a corpus as token shards, for data/tokenize. Three pieces, each usable alone:
//   DocumentReader  the documents of the input files, in order, a batch at a time: a text file is
//                   one document; a JSON Lines file (jsonl) one per line, the line's string field
//                   (e.g. "text", as Hugging Face datasets export them);
//   encode_documents  a batch encoded on several threads, one Gpt2Encoder each (an encoder is not
//                   thread-safe), each document prefixed by <|endoftext|>; the ids come out in
//                   document order, so the shards are the same bytes for any thread count;
//   ShardStream     the token stream cut into shards as it arrives: the first val_tokens into
//                   PREFIX_val.bin, then PREFIX_train_000000.bin, _000001, ... of shard_tokens each,
//                   the last one taking the tail (shard_tokens to 2*shard_tokens - 1 tokens, or all
//                   of train when it is shorter), at most 999,999 of them;
//                   existing() names a shard the prefix already has (the caller refuses it: a glob
//                   would mix two corpora) and remove_written() removes what it wrote (the caller
//                   calls it when the run fails).
// Documents are never split to encode them (BPE depends on the neighbouring text); the stream
// is cut between shards wherever a shard is full, as llm.c's data scripts do.
#pragma once
#include "bpe.h"
#include "../llmc/shards.h"

#include <atomic>
#include <cstdlib>
#include <glob.h>
#include <memory>
#include <thread>
#include <unistd.h>

struct Document {
    std::string text;    // the text, or for JSON Lines the line, parsed by the encoding thread
    std::string origin;  // the file, and for JSON Lines ":line": what an error names
    const std::string* field = nullptr;  // JSON Lines: the field that holds the text
};

// A JSON Lines document's line, parsed; false and "FILE:LINE: not JSON (why)" in *err if it is not JSON.
inline bool parse_json_line(const Document& doc, nlohmann::json* j, std::string* err) {
    try { *j = nlohmann::json::parse(doc.text); }
    catch (const nlohmann::json::exception& e) { *err = doc.origin + ": not JSON (" + json_error_text(e) + ")"; return false; }
    return true;
}

// A JSON Lines document's text: the string `*doc.field` of the line's object. On a bad line,
// false and "FILE:LINE: why" in *err.
inline bool document_text(const Document& doc, std::string* text, std::string* err) {
    nlohmann::json j;
    if (!parse_json_line(doc, &j, err)) return false;
    auto it = j.is_object() ? j.find(*doc.field) : j.end();
    if (it == j.end() || !it->is_string()) {
        *err = doc.origin + ": no string field \"" + *doc.field + "\"" + (j.is_object() ? "" : " (not a JSON object)");
        return false;
    }
    *text = it->get<std::string>();
    return true;
}

class DocumentReader {
public:
    DocumentReader(std::vector<std::string> paths, bool jsonl, std::string field)
        : paths_(std::move(paths)), jsonl_(jsonl), field_(std::move(field)) {}
    DocumentReader(const DocumentReader&) = delete;
    DocumentReader& operator=(const DocumentReader&) = delete;
    ~DocumentReader() { if (file_) fclose(file_); free(buf_); }

    // Replaces *docs with the next documents: at least one, then more while their text stays
    // under max_bytes. False at the end of the input, or on an error (one line in *err, naming
    // the file, and the line for JSON Lines).
    bool next_batch(std::vector<Document>* docs, size_t max_bytes, std::string* err) {
        docs->clear();
        err->clear();
        size_t bytes = 0;
        Document doc;
        while (bytes < max_bytes || docs->empty()) {
            if (!next(&doc, err)) break;
            bytes += doc.text.size();
            docs->push_back(std::move(doc));
        }
        return err->empty() && !docs->empty();
    }
    size_t bytes_read() const { return bytes_; }  // of the input files, JSON syntax included
    size_t documents() const { return docs_; }

private:
    // The next document; false at the end or on an error (*err set).
    bool next(Document* doc, std::string* err) {
        if (!jsonl_) {
            if (next_path_ == paths_.size()) return false;
            doc->origin = paths_[next_path_++];
            doc->field = nullptr;
            if (!read_file(doc->origin, &doc->text, err)) return false;
            bytes_ += doc->text.size();
            docs_++;
            return true;
        }
        std::string line;
        for (;;) {
            if (!file_) {
                if (next_path_ == paths_.size()) return false;
                path_ = paths_[next_path_++];
                line_ = 0;
                file_ = fopen(path_.c_str(), "rb");
                if (!file_) { *err = path_ + ": cannot open: " + strerror(errno); return false; }
            }
            if (!read_line(&line)) {
                bool failed = ferror(file_);
                fclose(file_);
                file_ = nullptr;
                if (failed) { *err = path_ + ": read failed"; return false; }
                continue;
            }
            line_++;
            bytes_ += line.size() + 1;
            if (line.find('\0') != std::string::npos) {  // JSON text never holds one: a binary file?
                *err = path_ + ":" + std::to_string(line_) + ": a NUL byte (not JSON text)";
                return false;
            }
            if (line.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank lines
            doc->text = std::move(line);
            doc->origin = path_ + ":" + std::to_string(line_);
            doc->field = &field_;
            docs_++;
            return true;
        }
    }
    // The next line without its '\n' (the last line may lack it); false at the end of the file.
    bool read_line(std::string* line) {
        ssize_t n = getline(&buf_, &cap_, file_);  // POSIX: NUL bytes included, any length
        if (n < 0) return false;
        if (n > 0 && buf_[n - 1] == '\n') n--;
        line->assign(buf_, (size_t)n);
        return true;
    }
    std::vector<std::string> paths_;
    bool jsonl_;
    std::string field_, path_;
    size_t next_path_ = 0, line_ = 0, bytes_ = 0, docs_ = 0;
    FILE* file_ = nullptr;
    char* buf_ = nullptr;  // getline's buffer
    size_t cap_ = 0;
};

// Encodes docs on encoders.size() threads (documents taken in turn from a shared counter; a JSON
// line is parsed there too) and appends <|endoftext|> + the ids of each document to *out, in
// document order. On a bad JSON line or invalid UTF-8: false, *err names the document's origin
// (the first bad one in the batch). The ids must fit uint16 (the caller checks the vocabulary).
inline bool encode_documents(std::vector<std::unique_ptr<Gpt2Encoder>>& encoders, const std::vector<Document>& docs,
                             std::vector<uint16_t>* out, std::string* err) {
    std::vector<std::vector<int>> ids(docs.size());
    std::vector<std::string> errors(docs.size());
    std::atomic<size_t> next{0};
    auto work = [&](Gpt2Encoder* enc) {
        std::string text;
        for (size_t i; (i = next.fetch_add(1)) < docs.size();) {
            if (docs[i].field && !document_text(docs[i], &text, &errors[i])) continue;
            ids[i].push_back(enc->eot());
            enc->encode(docs[i].field ? text : docs[i].text, &ids[i], &errors[i], docs[i].origin);
        }
    };
    const size_t n_threads = std::min(encoders.size(), docs.size());
    std::vector<std::thread> threads;
    for (size_t t = 1; t < n_threads; t++) threads.emplace_back(work, encoders[t].get());
    work(encoders[0].get());
    for (auto& t : threads) t.join();
    for (size_t i = 0; i < docs.size(); i++) {
        if (!errors[i].empty()) { *err = errors[i]; return false; }
        out->insert(out->end(), ids[i].begin(), ids[i].end());
    }
    return true;
}

// The token stream as shards, written as it comes (see the top of the file).
class ShardStream {
public:
    ShardStream(std::string prefix, size_t val_tokens, size_t shard_tokens)
        : prefix_(std::move(prefix)), val_want_(val_tokens), shard_tokens_(shard_tokens), val_pending_(val_tokens > 0) {}

    // Writes every shard that the front of *tokens completes, and removes those tokens. A train
    // shard is written only once a full one more follows it, so that the data's tail can go into
    // the last shard (finish): no shard is shorter than shard_tokens (unless all of train is),
    // where a short last shard would be shorter than a training step and refused by the trainer.
    bool add(std::vector<uint16_t>* tokens, std::string* err) {
        size_t used = 0;
        for (size_t want; tokens->size() - used >= (want = val_pending_ ? val_want_ : shard_tokens_) +
                                                   (val_pending_ ? 0 : shard_tokens_); used += want)
            if (!write(tokens->data() + used, want, err)) return false;
        tokens->erase(tokens->begin(), tokens->begin() + used);
        return true;
    }
    // At the end of the data: the rest as the last shard, of shard_tokens to 2*shard_tokens - 1
    // tokens (fewer only when it is the only train shard).
    bool finish(std::vector<uint16_t>* tokens, std::string* err) {
        if (!add(tokens, err)) return false;
        if (!tokens->empty() && !write(tokens->data(), tokens->size(), err)) return false;
        tokens->clear();
        return true;
    }
    size_t train_shards() const { return train_shards_; }
    size_t train_tokens() const { return train_tokens_; }
    size_t val_tokens() const { return val_tokens_; }
    std::string val_name() const { return prefix_ + "_val.bin"; }
    std::string train_glob() const {  // the prefix's own glob characters escaped
        std::string g;
        for (char c : prefix_) { if (c == '*' || c == '?' || c == '[' || c == '\\') g += '\\'; g += c; }
        return g + "_train_*.bin";
    }
    // The shards of an earlier run with this prefix, which a training glob would mix with ours:
    // "" if there are none, else one of them.
    std::string existing() const {
        if (access(val_name().c_str(), F_OK) == 0) return val_name();
        glob_t g;
        std::string found;
        if (glob(train_glob().c_str(), 0, nullptr, &g) == 0 && g.gl_pathc > 0) found = g.gl_pathv[0];
        globfree(&g);
        return found;
    }
    // After a failure: removes the shards this stream wrote, so that no partial corpus is left.
    void remove_written() {
        for (const std::string& f : written_) remove(f.c_str());
        written_.clear();
    }
    std::string train_name(size_t i) const {
        char num[16];
        snprintf(num, sizeof(num), "%06zu", i);
        return prefix_ + "_train_" + num + ".bin";
    }

private:
    bool write(const uint16_t* t, size_t n, std::string* err) {
        if (!val_pending_ && train_shards_ == kMaxShards) {  // train_name's 6 digits: the glob's order
            *err = "more than " + std::to_string(kMaxShards) + " training shards; raise --shard-tokens";
            return false;
        }
        const std::string name = val_pending_ ? val_name() : train_name(train_shards_);
        if (!shard_write(name, t, n, err)) return false;
        written_.push_back(name);
        if (val_pending_) { val_pending_ = false; val_tokens_ = n; }
        else { train_shards_++; train_tokens_ += n; }
        return true;
    }
    static constexpr size_t kMaxShards = 999999;
    std::string prefix_;
    size_t val_want_, shard_tokens_;
    bool val_pending_;
    size_t train_shards_ = 0, train_tokens_ = 0, val_tokens_ = 0;
    std::vector<std::string> written_;
};
