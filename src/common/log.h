// Diagnostics on stderr, silent unless SPIKEJIT_LOG asks for them (docs/runtime.md, "Logging").
#pragma once

#include <cstdio>
#include <string>
#include <type_traits>

namespace spikejit::log {

// From least to most talkative. Off is the default: the library prints nothing.
enum class Level : int { Off = 0, Warning = 1, Info = 2, Debug = 3, Trace = 4 };

// Parses a SPIKEJIT_LOG value, case-insensitively: "", "0", "off" -> Off; "warning" (or
// "warn"); "info" (or "1"); "debug" (or "2"); "trace" (or "3"). False for anything else.
bool parse_level(const std::string& text, Level* level);

// The level in force. SPIKEJIT_LOG is read once, on first use; a value parse_level does not
// know logs at Info, and one warning line says so. Cheap (one atomic load) after the first call.
Level level();

// Replaces the level for the rest of the process (tests; a program's own --verbose flag).
void set_level(Level level);

inline bool enabled(Level at) { return static_cast<int>(at) <= static_cast<int>(level()); }

// "warning", "info", "debug", "trace" ("off" for Off).
const char* level_name(Level level);

// Writes "spikejit: [<level>] <message>\n" to stderr with one write, so that lines of
// different threads do not interleave.
void write(Level at, const std::string& message);

// A message built with <<, without iostreams (the library formats no text through them: an
// iostream in an extension module shares the host process's locale machinery).
class Line {
 public:
  Line& operator<<(const std::string& s) { text_ += s; return *this; }
  Line& operator<<(const char* s) { text_ += s; return *this; }
  Line& operator<<(char c) { text_ += c; return *this; }
  template <class T, class = std::enable_if_t<std::is_arithmetic_v<T>>>
  Line& operator<<(T value) {
    if constexpr (std::is_floating_point_v<T>) {
      char buffer[32];
      std::snprintf(buffer, sizeof buffer, "%g", static_cast<double>(value));
      text_ += buffer;
    } else {
      text_ += std::to_string(value);
    }
    return *this;
  }
  const std::string& str() const { return text_; }

 private:
  std::string text_;
};

}  // namespace spikejit::log

// SPIKEJIT_LOG_AT(Level::Debug, "disk cache hit: " << path); the message is built only when
// that level is enabled.
#define SPIKEJIT_LOG_AT(level_, message_)                                        \
  do {                                                                           \
    if (::spikejit::log::enabled(::spikejit::log::level_)) {                     \
      ::spikejit::log::Line spikejit_log_stream_;                                \
      spikejit_log_stream_ << message_;                                          \
      ::spikejit::log::write(::spikejit::log::level_, spikejit_log_stream_.str()); \
    }                                                                            \
  } while (0)
