// Which name a body value is written as at a point of the body: the rule the printer follows and
// the verifier checks (a value must stay nameable where it is used).
#pragma once

#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "spikejit/ir.h"

namespace spikejit::ir {

class BodyNames {
 public:
  // Binds every declaration name to its declaration.
  explicit BodyNames(const Neuron& n);

  // Records the assignment `name = v` (call in body order).
  void bind(const std::string& name, ValueId v);

  // The name `v` is written as now: a leaf's declaration name while it is not rebound, else the
  // longest-standing current binding of `v`; nullptr when no current name denotes `v`.
  const std::string* name_of(ValueId v) const;

  // The declaration name of a slot leaf (Input, State, Param, Constant); nullptr otherwise.
  const std::string* declaration_name(const Node& leaf) const;

 private:
  static constexpr ValueId kDeclaration = -1;
  const Neuron& n_;
  std::unordered_map<std::string, std::pair<ValueId, int>> current_;  // name -> (value, time)
  std::unordered_map<ValueId, std::vector<std::string>> names_;      // value -> names bound to it
  int time_ = 0;
};

}  // namespace spikejit::ir
