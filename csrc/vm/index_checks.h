// Index checks: how a kernel that reads an index from data reports one out
// of range, and how the VM hears of it without adding a sync
// (docs/guarantees.md#indices-from-data).
//
// A checked kernel takes, after its own arguments, its call's *check record*
// (kCheckWords int64 words on the device it runs on) and the number of its
// check site (the executable's check_sites). An index out of range is
// clamped, so nothing is read or written outside a buffer, and the first
// one is written into the record: [0] 1, [1] the site, [2] the index,
// [3] the lowest and [4] one past the highest index allowed
// (shapefn/compiler/passes/index_checks.py writes the same words).
//
// The host reads a record where the device has synced anyway: at once on
// the host (kernels there are synchronous), and for a device at the VM's
// next sync or, for a call that ends without one, when a result of the call
// is read back (the result's TensorObj::checks). Each call has a record of
// its own, so a failure is its call's alone.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "shapefn/executable.h"
#include "shapefn/tensor.h"

namespace shapefn {

constexpr int kCheckWords = 8;
constexpr size_t kCheckRecordBytes = kCheckWords * sizeof(int64_t);

// Records on one device, allocated in blocks and zeroed once; a record a
// failure dirtied is zeroed again before it is reused.
class CheckBlock {
 public:
  static constexpr int kRecords = 64;
  explicit CheckBlock(std::shared_ptr<Device> device);
  ~CheckBlock();
  CheckBlock(const CheckBlock&) = delete;
  CheckBlock& operator=(const CheckBlock&) = delete;
  const std::shared_ptr<Device>& device() const { return device_; }
  void* record(int i) const { return static_cast<char*>(data_) + static_cast<size_t>(i) * stride_; }
  // Record i as the tensor a kernel takes.
  TensorRef RecordTensor(int i) const;

 private:
  std::shared_ptr<Device> device_;
  // Bytes from one record to the next: a kernel takes a record as a buffer
  // of its own, which OpenCL places only at aligned offsets.
  size_t stride_;
  void* data_ = nullptr;
  std::shared_ptr<Storage> storage_;  // data_, without owning it
};

// One call's record on one device. While its call runs, the VM only peeks
// at it (more kernels may write it); once the call has ended it is resolved
// once, after a sync on the device (by whichever comes first: the VM's next
// sync, or a result read back), and its outcome kept, so that the record
// can be reused.
class CallCheck final : public DeviceCheck {
 public:
  CallCheck(std::shared_ptr<CheckBlock> block, int index, std::shared_ptr<const Executable> exe);
  const Device& device() const override { return *block_->device(); }
  // Throws the failure the record holds so far (the running call's, after a sync).
  void Peek() const;
  // The call has ended: no kernel launched after this writes the record.
  void Close() { closed_ = true; }
  bool closed() const { return closed_; }
  // After a sync: reads the record of a closed check unless resolved already.
  void Verify() override;
  bool resolved() const;
  // Resolved with a failure: its record must be zeroed before reuse.
  bool failed() const;
  const TensorRef& tensor() const { return tensor_; }
  const std::shared_ptr<CheckBlock>& block() const { return block_; }
  int index() const { return index_; }

 private:
  std::shared_ptr<CheckBlock> block_;
  int index_;
  TensorRef tensor_;
  std::shared_ptr<const Executable> exe_;
  bool closed_ = false;  // written by the VM before the check is shared
  mutable std::mutex mutex_;
  bool resolved_ = false;
  std::shared_ptr<const Error> failure_;
};

// The error a record's words describe: "<what> is <index>, outside [low,
// high)", its source the site's node.
Error CheckFailure(const Executable& exe, const int64_t* words);

// A VM's records: the running call's, per device, and those of earlier
// calls whose results went out with their checks unread.
class IndexChecks {
 public:
  explicit IndexChecks(std::shared_ptr<const Executable> exe) : exe_(std::move(exe)) {}
  IndexChecks(const IndexChecks&) = delete;
  IndexChecks& operator=(const IndexChecks&) = delete;

  // A call starts: reuses the records of resolved checks.
  void BeginCall();
  // The running call's record on `device` (made on first use in the call).
  // On the host the VM checks it after every kernel (CheckHost).
  TensorRef RecordFor(const std::shared_ptr<Device>& device);
  // Throws the failure a host kernel of the running call wrote, if any.
  void CheckHost() const {
    if (host_words_ != nullptr && host_words_[0] != 0) FailHost();
  }
  // Whether a sync must look at records: the running call used one on a
  // device, inherited checks, or earlier calls left checks unresolved.
  bool any() const { return device_check_ != nullptr || !inherited_.empty() || unresolved_ > 0; }
  // The checks `t` waits on become the running call's too.
  void Inherit(const TensorObj& t);
  // After a sync on `device`: throws the running call's failure (its own or
  // an argument's), and resolves earlier calls' checks there.
  void AfterSync(const Device& device);
  // The running call ends: the checks its results wait on (null for none).
  std::shared_ptr<const DeviceChecks> EndCall();
  // The running call is failing: its checks are dropped with it.
  void AbandonCall();

 private:
  [[noreturn]] void FailHost() const;
  std::shared_ptr<const Executable> exe_;
  std::shared_ptr<CallCheck> device_check_;  // the running call's, on its device
  std::shared_ptr<CheckBlock> host_block_;
  TensorRef host_record_;          // the host's (of host_block_), reused by every call
  int64_t* host_words_ = nullptr;  // while the running call uses it
  DeviceChecks inherited_;
  std::vector<std::shared_ptr<CallCheck>> out_;  // ended calls' checks whose records are not yet reused
  size_t unresolved_ = 0;                        // of out_, at the last count
  std::vector<std::shared_ptr<CheckBlock>> blocks_;
  std::vector<std::pair<std::shared_ptr<CheckBlock>, int>> free_;
};

}  // namespace shapefn
