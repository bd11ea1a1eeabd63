// spikejit exceptions as Python exceptions:
//   ParseError    -> spikejit._core.ParseError    (a ValueError; message = every diagnostic)
//   ArgumentError -> spikejit._core.ArgumentError (a ValueError; `.argument` names the argument)
//   Error         -> spikejit._core.Error         (a RuntimeError)
#include <exception>
#include <string>

#include <nanobind/stl/string.h>  // the diagnostics tuples hold std::string

#include "bindings.h"
#include "spikejit/error.h"

namespace nb = nanobind;

namespace spikejit::python {
namespace {

PyObject* parse_error_type = nullptr;
PyObject* argument_error_type = nullptr;
PyObject* error_type = nullptr;

PyObject* new_exception_type(nb::module_& m, const char* name, PyObject* base, const char* doc) {
  std::string qualified = std::string("spikejit._core.") + name;
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, base, nullptr);
  if (!type) throw nb::python_error();
  m.attr(name) = nb::handle(type);
  return type;
}

// Raises `type(message)` with extra attributes set on the instance.
void raise_with(PyObject* type, const std::string& message, const char* attribute, nb::object value) {
  nb::object instance = nb::steal(PyObject_CallFunction(type, "s", message.c_str()));
  if (!instance.is_valid()) return;  // the call already set a Python error
  if (attribute) nb::setattr(instance, attribute, value);
  PyErr_SetObject(type, instance.ptr());
}

}  // namespace

void set_python_error(const std::exception_ptr& p, void*) {
  try {
    std::rethrow_exception(p);
  } catch (const ParseError& e) {
    nb::list diagnostics;
    for (const Diagnostic& d : e.diagnostics())
      diagnostics.append(nb::make_tuple(d.file, d.line, d.column, d.message));
    raise_with(parse_error_type, e.what(), "diagnostics", diagnostics);
  } catch (const ArgumentError& e) {
    raise_with(argument_error_type, e.what(), "argument", nb::str(e.argument().c_str()));
  } catch (const Error& e) {
    PyErr_SetString(error_type, e.what());
  }
}

void bind_errors(nb::module_& m) {
  error_type = new_exception_type(m, "Error", PyExc_RuntimeError, "An error raised by the spikejit core.");
  parse_error_type = new_exception_type(
      m, "ParseError", PyExc_ValueError,
      "A neuron definition has problems; the message lists every diagnostic (file:line:col, the "
      "line and a caret), `.diagnostics` holds (file, line, column, message) tuples.");
  argument_error_type = new_exception_type(
      m, "ArgumentError", PyExc_ValueError,
      "A bad argument; the message names it, what was expected and what came; `.argument` is its name.");
  nb::register_exception_translator(set_python_error);
}

}  // namespace spikejit::python
