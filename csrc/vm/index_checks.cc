// Index checks: records, their reading after syncs, their reuse (index_checks.h).
#include "index_checks.h"

#include <algorithm>
#include <cstring>

#include "shapefn/error.h"

namespace shapefn {

namespace {

// An ended call's checks beyond this many unresolved (a caller that never
// reads a result back) are resolved with a sync at the next call's start.
constexpr size_t kMaxUnresolved = 4096;

}  // namespace

CheckBlock::CheckBlock(std::shared_ptr<Device> device)
    : device_(std::move(device)), stride_(std::max(kCheckRecordBytes, device_->tensor_offset_alignment())) {
  const size_t nbytes = kRecords * stride_;
  data_ = device_->Alloc(nbytes, kKernelBufferAlignment);
  device_->ClearCheckWords(data_, nbytes);
  storage_ = std::make_shared<Storage>();
  storage_->data = data_;
  storage_->nbytes = nbytes;
  storage_->device = device_;
}

CheckBlock::~CheckBlock() { device_->Free(data_); }

TensorRef CheckBlock::RecordTensor(int i) const {
  auto t = std::make_shared<TensorObj>();
  t->storage = storage_;
  t->byte_offset = static_cast<size_t>(i) * stride_;
  t->shape = {kCheckWords};
  t->dtype = DLDataType{kDLInt, 64, 1};
  return t;
}

CallCheck::CallCheck(std::shared_ptr<CheckBlock> block, int index, std::shared_ptr<const Executable> exe)
    : block_(std::move(block)), index_(index), tensor_(block_->RecordTensor(index)), exe_(std::move(exe)) {}

void CallCheck::Peek() const {
  int64_t words[kCheckWords];
  block_->device()->ReadCheckWords(words, block_->record(index_), kCheckRecordBytes);
  if (words[0] != 0) throw CheckFailure(*exe_, words);
}

void CallCheck::Verify() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!resolved_) {
    int64_t words[kCheckWords];
    block_->device()->ReadCheckWords(words, block_->record(index_), kCheckRecordBytes);
    if (words[0] != 0) failure_ = std::make_shared<const Error>(CheckFailure(*exe_, words));
    resolved_ = true;
  }
  if (failure_) throw *failure_;
}

bool CallCheck::resolved() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return resolved_;
}

bool CallCheck::failed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return failure_ != nullptr;
}

Error CheckFailure(const Executable& exe, const int64_t* words) {
  const int64_t site = words[1];
  const auto& sites = exe.check_sites();
  if (site < 0 || static_cast<size_t>(site) >= sites.size()) {
    return Error(ErrorKind::kIndex, "a kernel read index " + std::to_string(words[2]) + " out of range [" +
                                        std::to_string(words[3]) + ", " + std::to_string(words[4]) +
                                        ") at check site " + std::to_string(site) + ", which the executable lacks");
  }
  const CheckSite& s = sites[static_cast<size_t>(site)];
  Error error(ErrorKind::kIndex, s.what + " is " + std::to_string(words[2]) + ", outside [" + std::to_string(words[3]) +
                                     ", " + std::to_string(words[4]) + ")");
  return s.source.empty() ? error : error.WithSource(s.source);
}

void IndexChecks::BeginCall() {
  if (host_record_ && static_cast<int64_t*>(host_record_->data())[0] != 0) {
    std::memset(host_record_->data(), 0, kCheckRecordBytes);  // (dirtied by the last call's failure)
  }
  if (out_.empty()) return;
  if (unresolved_ > kMaxUnresolved) {
    // A caller that never reads results back: one sync resolves them all.
    out_.front()->block()->device()->Sync();
    for (const auto& check : out_) {
      try {
        check->Verify();
      } catch (const Error&) {
        // (kept for that call's results, which raise it when read)
      }
    }
  }
  std::vector<std::shared_ptr<CallCheck>> kept;
  for (auto& check : out_) {
    if (!check->resolved()) {
      kept.push_back(std::move(check));
      continue;
    }
    // Resolved: its kernels are done, and its results keep the outcome.
    if (check->failed()) {
      check->block()->device()->ClearCheckWords(check->block()->record(check->index()), kCheckRecordBytes);
    }
    free_.emplace_back(check->block(), check->index());
  }
  out_ = std::move(kept);
  unresolved_ = out_.size();
}

TensorRef IndexChecks::RecordFor(const std::shared_ptr<Device>& device) {
  if (device->is_host()) {
    if (!host_record_) {
      auto block = std::make_shared<CheckBlock>(device);
      host_block_ = block;
      host_record_ = block->RecordTensor(0);
    }
    host_words_ = static_cast<int64_t*>(host_record_->data());
    return host_record_;
  }
  if (!device_check_) {
    if (free_.empty() || free_.back().first->device() != device) {
      auto block = std::make_shared<CheckBlock>(device);
      blocks_.push_back(block);
      for (int i = CheckBlock::kRecords - 1; i >= 0; --i) free_.emplace_back(block, i);
    }
    auto [block, index] = free_.back();
    free_.pop_back();
    device_check_ = std::make_shared<CallCheck>(std::move(block), index, exe_);
  }
  return device_check_->tensor();
}

void IndexChecks::FailHost() const { throw CheckFailure(*exe_, host_words_); }

void IndexChecks::Inherit(const TensorObj& t) {
  for (const auto& check : *t.checks) {
    bool known = false;
    for (const auto& have : inherited_) known = known || have == check;
    if (!known) inherited_.push_back(check);
  }
}

void IndexChecks::AfterSync(const Device& device) {
  if (device_check_ && &device_check_->device() == &device) device_check_->Peek();
  for (const auto& check : inherited_) {
    if (&check->device() == &device) check->Verify();
  }
  if (unresolved_ == 0) return;
  size_t unresolved = 0;
  for (const auto& check : out_) {
    if (&check->device() == &device) {
      try {
        check->Verify();
      } catch (const Error&) {
        // (an earlier call's: its results raise it when read)
      }
    }
    unresolved += check->resolved() ? 0 : 1;
  }
  unresolved_ = unresolved;
}

std::shared_ptr<const DeviceChecks> IndexChecks::EndCall() {
  host_words_ = nullptr;
  auto checks = std::make_shared<DeviceChecks>();
  if (device_check_) {
    device_check_->Close();
    checks->push_back(device_check_);
    out_.push_back(std::move(device_check_));
    unresolved_ += 1;
    device_check_.reset();
  }
  for (auto& check : inherited_) checks->push_back(std::move(check));
  inherited_.clear();
  if (checks->empty()) return nullptr;
  return checks;
}

void IndexChecks::AbandonCall() {
  host_words_ = nullptr;
  inherited_.clear();
  if (!device_check_) return;
  // Its kernels may still run: the record waits, closed, for a later sync
  // (a failure it then holds belongs to no result).
  device_check_->Close();
  out_.push_back(std::move(device_check_));
  unresolved_ += 1;
  device_check_.reset();
}

}  // namespace shapefn
