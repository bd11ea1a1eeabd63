// Whole-file reads and writes through file descriptors (the library formats no text through
// iostreams, see common/log.h).
#pragma once

#include <string>

namespace spikejit {

// The bytes of `path` into *out; false when it cannot be opened or read.
bool read_file(const std::string& path, std::string* out);

// Writes all of `data` to `fd`, retrying short writes; false on an error.
bool write_all(int fd, const std::string& data);

// Creates (or truncates) `path` with mode 0600 and writes `data`; false on an error (errno set).
bool write_file(const std::string& path, const std::string& data);

}  // namespace spikejit
