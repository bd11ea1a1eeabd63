#include "spikejit/program.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>

#include "spikejit/autodiff.h"
#include "spikejit/error.h"
#include "spikejit/frontend.h"

namespace spikejit {

struct Program::Impl {
  ir::Neuron neuron;
  ir::Step forward;
  std::once_flag backward_once;
  ir::Step backward;
};

Program::Program(ir::Neuron neuron) : impl_(std::make_shared<Impl>()) {
  ir::verify(neuron);
  impl_->forward = ir::lower(neuron);
  impl_->neuron = std::move(neuron);
}

Program Program::from_text(std::string_view text, std::string_view file) {
  return Program(frontend::parse(text, file));
}

Program Program::from_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open neuron file '" + path + "': " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw Error("cannot read neuron file '" + path + "'");
  return from_text(text.str(), path);
}

const ir::Neuron& Program::neuron() const { return impl_->neuron; }
const ir::Step& Program::forward() const { return impl_->forward; }

// A failed differentiation leaves the flag unset, so the next call tries again and throws again.
const ir::Step& Program::backward() const {
  std::call_once(impl_->backward_once, [this] { impl_->backward = autodiff::differentiate(impl_->forward); });
  return impl_->backward;
}

std::string Program::canonical() const { return frontend::print(impl_->neuron); }
std::string Program::hash() const { return frontend::hash(impl_->neuron); }

}  // namespace spikejit
