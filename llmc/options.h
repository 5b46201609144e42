// Command-line options from ONE table: the same entries drive the parser and --help, so the
// usage text cannot drift from what is accepted. Host-only; unit-tested on the CPU.
//
//   --name value   --name=value   -n value   (flags: --name / -n, no value)
// Every error is one line: "option --lr: 'abc' is not a number", "unknown option '--foo' (see --help)", ...
#pragma once
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

enum OptionType { OPT_INT, OPT_INT64, OPT_FLOAT, OPT_DOUBLE, OPT_STRING, OPT_FLAG };

struct Option {
    const char* name;   // long name without the dashes
    char short_name;    // 0: none
    OptionType type;
    void* target;       // int*, long long*, float*, double*, std::string*, bool*
    const char* help;
    double min = -INFINITY, max = INFINITY;  // accepted range of a number
};

inline std::string option_value_string(const Option& o) {
    char buf[64];
    switch (o.type) {
        case OPT_INT: snprintf(buf, sizeof buf, "%d", *(int*)o.target); return buf;
        case OPT_INT64: snprintf(buf, sizeof buf, "%lld", *(long long*)o.target); return buf;
        case OPT_FLOAT: snprintf(buf, sizeof buf, "%g", *(float*)o.target); return buf;
        case OPT_DOUBLE: snprintf(buf, sizeof buf, "%g", *(double*)o.target); return buf;
        case OPT_STRING: return "'" + *(std::string*)o.target + "'";
        case OPT_FLAG: return *(bool*)o.target ? "on" : "off";
    }
    return "";
}

inline void options_help(FILE* f, const char* usage, const std::vector<Option>& opts) {
    fprintf(f, "%s\n\nOptions (default in brackets):\n", usage);
    for (const Option& o : opts) {
        std::string names = std::string("  --") + o.name;
        if (o.short_name) names += std::string(", -") + o.short_name;
        if (o.type != OPT_FLAG) names += o.type == OPT_STRING ? " S" : " N";
        fprintf(f, "%-30s %s [%s]\n", names.c_str(), o.help, option_value_string(o).c_str());
    }
    fprintf(f, "%-30s %s\n", "  --help, -h", "print this and exit");
}

// The length of the valid UTF-8 sequence at s[i], or 0 when s[i] starts none. A sequence cut short
// counts as invalid in *bad bytes (at least 1): its valid start, which becomes one U+FFFD, as in
// Python's decode(errors="replace").
inline size_t utf8_sequence(const std::string& s, size_t i, size_t* bad) {
    const unsigned char c = (unsigned char)s[i];
    *bad = 1;
    if (c < 0x80) return 1;
    // the continuation bytes needed, and the range of the first (which rules out overlong forms,
    // surrogates and code points above U+10FFFF); the others are 80..BF
    const int need = c >= 0xC2 && c <= 0xDF ? 1 : c >= 0xE0 && c <= 0xEF ? 2 : c >= 0xF0 && c <= 0xF4 ? 3 : 0;
    const unsigned char lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80, hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
    size_t k = 0;
    for (; k < (size_t)need && i + 1 + k < s.size(); k++) {
        const unsigned char b = (unsigned char)s[i + 1 + k];
        if (b < (k ? 0x80 : lo) || b > (k ? 0xBF : hi)) break;
    }
    if (need > 0 && k == (size_t)need) return 1 + k;
    *bad = 1 + k;
    return 0;
}

// `text` for an error line: control bytes (a NUL, a stray \r, an escape) and bytes of no valid
// UTF-8 sequence (a Latin-1 \xe9, a stray continuation byte, a character cut short) as \xNN, so
// a message stays one readable line of UTF-8 whatever a file or argument held; valid UTF-8 as it
// is; cut (then "...") once max_bytes of the result are written (80: a value; more where the
// whole text matters, such as two paths compared), between characters. The result's length, not
// the text's, is what is bounded: each escaped byte takes four.
inline std::string printable(const std::string& text, size_t max_bytes = 80) {
    std::string out;
    size_t i = 0;
    for (size_t n, bad; i < text.size() && out.size() < max_bytes; i += n ? n : 1) {
        const unsigned char ch = (unsigned char)text[i];
        n = utf8_sequence(text, i, &bad);
        if (n == 0 || ch < 0x20 || ch == 0x7f) { char buf[8]; snprintf(buf, sizeof buf, "\\x%02x", ch); out += buf; }
        else out.append(text, i, n);
    }
    return i < text.size() ? out + "..." : out;
}

// Sets one option from its text value; false + err on a bad value.
inline bool option_set(const Option& o, const std::string& flag, const std::string& text, std::string* err) {
    if (o.type == OPT_STRING) { *(std::string*)o.target = text; return true; }
    const char* s = text.c_str();
    char* end = nullptr;
    errno = 0;
    const bool real = o.type == OPT_FLOAT || o.type == OPT_DOUBLE;
    long long whole = 0;   // an integer option's value, exactly (a double holds 53 bits)
    const double v = real ? strtod(s, &end) : (double)(whole = strtoll(s, &end, 10));
    if (text.empty() || isspace((unsigned char)text[0]) || end != s + text.size() || (real && errno != ERANGE && !std::isfinite(v))) {
        *err = "option " + flag + ": '" + printable(text) + "' is not " + (real ? "a number" : "an integer");
        return false;
    }
    // Too large (or too small) to hold: strtoll/strtod saturate with ERANGE, and a float option
    // must not round a non-zero value to 0 or to infinity (--nccl-timeout 1e-46 would mean "never").
    if (real && ((errno == ERANGE && std::fabs(v) < 1) || (o.type == OPT_FLOAT && v != 0 && (float)v == 0))) {
        *err = "option " + flag + ": " + printable(text) + (o.type == OPT_FLOAT ? " is too close to 0 to be held as a 32-bit float" : " is below a double's normal range");
        return false;
    }
    // a subnormal float is held, but the GPU's fast math (--use_fast_math) reads it as 0 (--eps 1e-40: 0/0)
    if (o.type == OPT_FLOAT && v != 0 && std::fabs((float)v) < FLT_MIN) {
        *err = "option " + flag + ": " + printable(text) + " is below a 32-bit float's normal range (the GPU would read it as 0)";
        return false;
    }
    const bool too_large = errno == ERANGE || (o.type == OPT_FLOAT && std::isinf((float)v));
    // an int option's range is at most int's, whatever the table says (it may leave it unbounded)
    const double lo = o.type == OPT_INT ? std::max(o.min, (double)INT_MIN) : o.min,
                 hi = o.type == OPT_INT ? std::min(o.max, (double)INT_MAX) : o.max;
    if (too_large || v < lo || v > hi) {   // the value quoted cut (printable): a 300-digit one pushed the range out of the line
        char range[96];
        snprintf(range, sizeof range, real ? " is out of range [%g, %g]" : " is out of range [%.0f, %.0f]", lo, hi);
        *err = "option " + flag + ": " + printable(text) + range;
        return false;
    }
    if (o.type == OPT_INT) *(int*)o.target = (int)whole;
    else if (o.type == OPT_INT64) *(long long*)o.target = whole;
    else if (o.type == OPT_DOUBLE) *(double*)o.target = v == 0 ? 0.0 : v;   // -0 as 0 (options.txt would keep "-0")
    else *(float*)o.target = v == 0 ? 0.0f : (float)v;
    return true;
}

// The shortest text of 6..max_digits significant digits that reads back to exactly v (9 digits
// always do for a float, 17 for a double).
template <class T> std::string shortest_exact(T v, int max_digits) {
    char buf[64];
    for (int digits = 6; digits <= max_digits; digits++) {
        snprintf(buf, sizeof buf, "%.*g", digits, (double)v);
        if ((T)strtod(buf, nullptr) == v) break;
    }
    return buf;
}

// An option's value as text that option_set reads back exactly (floats with as many significant
// digits as that takes, flags as on/off, strings as they are): how a run keeps its options (options_text).
inline std::string option_value_exact(const Option& o) {
    switch (o.type) {
        case OPT_FLOAT: return shortest_exact(*(float*)o.target, 9);
        case OPT_DOUBLE: return shortest_exact(*(double*)o.target, 17);
        case OPT_STRING: return *(std::string*)o.target;
        default: return o.type == OPT_FLAG ? (*(bool*)o.target ? "on" : "off") : option_value_string(o);
    }
}

// The options for which keep(name) is true as "name=value" lines (option_value_exact).
template <class Keep> std::string options_text(const std::vector<Option>& opts, Keep keep) {
    std::string text;
    for (const Option& o : opts)
        if (keep(o.name)) text += std::string(o.name) + "=" + option_value_exact(o) + "\n";
    return text;
}

// Sets options from options_text's lines. false + one line naming `where` on a line without '=',
// or a value option_set refuses; a name the table does not have (an option since removed) is an
// error too, unless `unknown` collects such names.
inline bool options_apply_text(const std::vector<Option>& opts, const std::string& text, const std::string& where, std::string* err,
                               std::vector<std::string>* unknown = nullptr) {
    size_t pos = 0;
    while (pos < text.size()) {
        size_t end = text.find('\n', pos);
        if (end == std::string::npos) end = text.size();
        std::string line = text.substr(pos, end - pos);
        pos = end + 1;
        if (!line.empty() && line.back() == '\r') line.pop_back();   // a file saved with CRLF line ends
        if (line.empty()) continue;
        const size_t eq = line.find('=');
        const Option* opt = nullptr;
        if (eq != std::string::npos)
            for (const Option& o : opts) if (line.compare(0, eq, o.name) == 0 && eq == strlen(o.name)) opt = &o;
        if (!opt && eq != std::string::npos && unknown) { unknown->push_back(printable(line.substr(0, eq))); continue; }
        if (!opt) { *err = where + ": '" + printable(line) + "' is not NAME=VALUE of a known option"; return false; }
        const std::string value = line.substr(eq + 1);
        if (opt->type == OPT_FLAG) {
            if (value != "on" && value != "off") { *err = where + ": '" + printable(line) + "': a flag is on or off"; return false; }
            *(bool*)opt->target = value == "on";
        } else if (!option_set(*opt, std::string("--") + opt->name, value, err)) {
            *err = where + ": " + *err;
            return false;
        }
    }
    return true;
}

// The option a command-line argument names: "--name", "--name=value" (*value, *has_value) or "-x";
// nullptr for none.
inline const Option* option_of_arg(const std::vector<Option>& opts, const std::string& arg, std::string* value, bool* has_value) {
    const Option* opt = nullptr;
    *has_value = false;
    if (arg.rfind("--", 0) == 0) {
        std::string name = arg.substr(2);
        size_t eq = name.find('=');
        if (eq != std::string::npos) { *value = name.substr(eq + 1); name = name.substr(0, eq); *has_value = true; }
        for (const Option& o : opts) if (name == o.name) opt = &o;
    } else if (arg.size() == 2 && arg[0] == '-') {
        for (const Option& o : opts) if (o.short_name && arg[1] == o.short_name) opt = &o;
    }
    return opt;
}

// The (long) names of the options argv[1..argc) sets, as options_parse would read them; an
// argument that names no option is passed over (options_parse reports it).
inline std::vector<std::string> options_given(const std::vector<Option>& opts, int argc, const char* const* argv) {
    std::vector<std::string> names;
    for (int i = 1; i < argc; i++) {
        std::string value;
        bool has_value;
        const Option* opt = option_of_arg(opts, argv[i], &value, &has_value);
        if (!opt) continue;
        names.push_back(opt->name);
        if (opt->type != OPT_FLAG && !has_value) i++;   // its value
    }
    return names;
}

// Parses argv[1..argc). Returns false + err on any problem; *help is set when -h/--help appears.
// positional: where arguments that are not options (input files: no leading '-') go; without it
// they are errors too.
inline bool options_parse(const std::vector<Option>& opts, int argc, const char* const* argv, bool* help, std::string* err,
                          std::vector<std::string>* positional = nullptr) {
    *help = false;
    for (int i = 1; i < argc; i++) {
        std::string arg = argv[i], value;
        bool has_value = false;
        if (arg == "-h" || arg == "--help") { *help = true; return true; }
        if (positional && (arg.empty() || arg[0] != '-')) { positional->push_back(arg); continue; }
        const Option* opt = option_of_arg(opts, arg, &value, &has_value);
        if (!opt) { *err = "unknown option '" + printable(arg) + "' (see --help)"; return false; }
        const std::string flag = std::string("--") + opt->name;
        if (opt->type == OPT_FLAG) {
            if (has_value) { *err = "option " + flag + " takes no value"; return false; }
            *(bool*)opt->target = true;
            continue;
        }
        if (!has_value) {
            if (i + 1 >= argc) { *err = "option " + flag + " needs a value"; return false; }
            // `-o --resume`: a text option would take the next option as its value, silently
            std::string next_value;
            bool next_has;
            const std::string next = argv[i + 1];
            if (opt->type == OPT_STRING && (next == "-h" || next == "--help" || option_of_arg(opts, next, &next_value, &next_has))) {
                *err = "option " + flag + " needs a value, and the next argument is the option " + printable(next) +
                       " (a value that starts with - goes as " + flag + "=VALUE)";
                return false;
            }
            value = argv[++i];
        }
        if (!option_set(*opt, flag, value, err)) return false;
    }
    return true;
}
