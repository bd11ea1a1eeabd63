// Reading a neuron file, with the reason when it cannot be read.
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "common/file_io.h"
#include "spikejit/error.h"
#include "spikejit/frontend.h"

namespace spikejit::frontend {

std::string read_neuron_file(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    throw Error("cannot read neuron file '" + path + "': it is a directory");
  }
  std::string text;
  errno = 0;
  if (!read_file(path, &text)) {
    throw Error("cannot read neuron file '" + path + "': " + std::strerror(errno ? errno : EIO));
  }
  return text;
}

}  // namespace spikejit::frontend
