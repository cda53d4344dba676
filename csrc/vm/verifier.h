// Everything the dispatch loop relies on, proven in one place: at load (the
// Executable's constructor) and when a VM links an executable to the shape
// functions it resolved.
#pragma once

#include <vector>

#include "isa.h"
#include "shapefn/executable.h"
#include "shapefn/registry.h"

namespace shapefn {

// Checks every table, every operand (by its kind in isa.def) and every
// instruction's own rules. Throws Error(kFormat) naming the first problem.
void VerifyExecutable(const Executable& exe);

// Decodes the functions of a verified executable for a VM whose shape
// functions are `shape_funcs` (one per exe.shape_funcs()), and runs each
// instruction's check again, now with what depends on them (shape-function
// arity: Error(kValue)).
std::vector<std::vector<Instruction>> Link(const Executable& exe, const std::vector<ShapeFuncEntryPtr>& shape_funcs);

}  // namespace shapefn
