// Program: a verified neuron with its lowered forward step and its lazily derived backward step.
#include "spikejit/program.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>

#include "common/sha256.h"
#include "spikejit/autodiff.h"
#include "spikejit/error.h"
#include "spikejit/frontend.h"

namespace spikejit {

struct Program::Impl {
  ir::Neuron neuron;
  ir::Step forward;
  std::string canonical;  // computed once: the hash is on every kernel-cache lookup
  std::string hash;
  std::once_flag backward_once;
  ir::Step backward;
  std::vector<int> saved_inputs;
};

Program::Program(ir::Neuron neuron) : impl_(std::make_shared<Impl>()) {
  ir::verify(neuron);
  impl_->forward = ir::lower(neuron);
  impl_->canonical = frontend::print(neuron);
  impl_->hash = sha256_hex(impl_->canonical);
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
  std::call_once(impl_->backward_once, [this] {
    ir::Step backward = autodiff::differentiate(impl_->forward);
    std::vector<int> saved_inputs;
    for (ir::ValueId v : backward.saved) {
      const ir::Node& node = impl_->forward.nodes[static_cast<size_t>(v)];
      saved_inputs.push_back(node.op == ir::Op::Input ? node.index : -1);
    }
    impl_->backward = std::move(backward);
    impl_->saved_inputs = std::move(saved_inputs);
  });
  return impl_->backward;
}

const std::vector<int>& Program::saved_inputs() const {
  backward();
  return impl_->saved_inputs;
}

std::string Program::canonical() const { return impl_->canonical; }
std::string Program::hash() const { return impl_->hash; }

}  // namespace spikejit
