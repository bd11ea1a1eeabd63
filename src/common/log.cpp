// SPIKEJIT_LOG: parsing the level once and writing whole lines to stderr.
#include "common/log.h"

#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdlib>

namespace spikejit::log {
namespace {

constexpr int kUnread = -1;
std::atomic<int> current{kUnread};

std::string lower(const std::string& text) {
  std::string out = text;
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

Level read_env() {
  const char* value = std::getenv("SPIKEJIT_LOG");
  const std::string text = value ? value : "";
  Level parsed = Level::Off;
  if (parse_level(text, &parsed)) return parsed;
  write(Level::Warning, "SPIKEJIT_LOG='" + text +
                            "' is not one of off, warning, info, debug, trace (or 0-3); "
                            "logging at info");
  return Level::Info;
}

}  // namespace

bool parse_level(const std::string& text, Level* level) {
  const std::string t = lower(text);
  if (t.empty() || t == "0" || t == "off") {
    *level = Level::Off;
  } else if (t == "warning" || t == "warn") {
    *level = Level::Warning;
  } else if (t == "info" || t == "1") {
    *level = Level::Info;
  } else if (t == "debug" || t == "2") {
    *level = Level::Debug;
  } else if (t == "trace" || t == "3") {
    *level = Level::Trace;
  } else {
    return false;
  }
  return true;
}

Level level() {
  int value = current.load(std::memory_order_relaxed);
  if (value == kUnread) {
    // Two threads may both read the environment here; they store the same value.
    value = static_cast<int>(read_env());
    int expected = kUnread;
    if (!current.compare_exchange_strong(expected, value)) value = expected;
  }
  return static_cast<Level>(value);
}

void set_level(Level level) { current.store(static_cast<int>(level)); }

const char* level_name(Level level) {
  switch (level) {
    case Level::Off: return "off";
    case Level::Warning: return "warning";
    case Level::Info: return "info";
    case Level::Debug: return "debug";
    case Level::Trace: return "trace";
  }
  return "?";
}

void write(Level at, const std::string& message) {
  const std::string line = std::string("spikejit: [") + level_name(at) + "] " + message + "\n";
  size_t done = 0;
  while (done < line.size()) {
    ssize_t n = ::write(STDERR_FILENO, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // stderr closed or full: a diagnostic is not worth an error
    done += static_cast<size_t>(n);
  }
}

}  // namespace spikejit::log
