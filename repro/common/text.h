// text.h: the small text and file helpers every part of the CLI uses.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace sdpa {

// `s` on one line: newlines become spaces, trailing spaces go (CLI11's messages can span lines;
// the harness promises one); and a library's message inside it in the harness's words:
// nlohmann::json's "[json.exception.parse_error.101] parse error at line 1, column 2: syntax error
// while parsing value - invalid literal; last read: 'no'" as "line 1, column 2: invalid literal;
// last read: 'no'", "[json.exception.out_of_range.403] key 'cells' not found" as "no key 'cells'",
// "[json.exception.type_error.302] type must be string, but is number" as "a string was expected,
// not a number"; std::filesystem's "filesystem error: status: File name too long [PATH]" as
// "'PATH': File name too long". Every command's error line goes through it.
std::string one_line(std::string s);

// One number through a printf format, e.g. format_number("%.3f", x).
std::string format_number(const char* printf_format, double x);

// "90", "90s", "30m", "2h" as seconds (more than 0, at most 30 days); throws InputError naming
// `option` otherwise.
double parse_duration(const std::string& text, const std::string& option);

// The whole file as bytes, or nothing when it cannot be opened.
std::optional<std::string> read_file(const std::string& path);

}  // namespace sdpa
