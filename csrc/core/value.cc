// Destruction of tuple values (see TupleDeleter in value.h).
#include "shapefn/value.h"

namespace shapefn {

void TupleDeleter::operator()(std::vector<Value>* fields) const {
  // The outermost deletion on a thread drains a work list; the deletions it
  // sets off (a field held the last reference to a nested tuple) only join
  // the list, so the stack stays flat however deep the tuples nest.
  thread_local std::vector<std::vector<Value>*>* pending = nullptr;
  if (pending != nullptr) {
    pending->push_back(fields);
    return;
  }
  std::vector<std::vector<Value>*> work{fields};
  pending = &work;
  while (!work.empty()) {
    std::vector<Value>* next = work.back();
    work.pop_back();
    delete next;
  }
  pending = nullptr;
}

}  // namespace shapefn
