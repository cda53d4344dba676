// Device slots: which device of a VM a tensor lives on. Executables name
// slots, not devices, so one executable runs on any device. Named once here;
// the disassembler prints these names and Python takes them from
// shapefn._core.device_slots() (shapefn.runtime.devices.DEVICE_SLOTS).
#pragma once

namespace shapefn {

// X(constant, value, name)
#define SHAPEFN_DEVICE_SLOTS(X)  \
  X(kHostSlot, 0, "host")        \
  X(kExecutionSlot, 1, "device") \
  X(kAnySlot, -1, "any")

// kHostSlot: the host CPU. kExecutionSlot: the device the VM runs on.
// kAnySlot: a parameter of an internal function, which takes any value
// (shapes, ints, tuples, tensors anywhere) unchecked.
#define SHAPEFN_DEVICE_SLOT_CONSTANT(constant, value, name) constexpr int constant = value;
SHAPEFN_DEVICE_SLOTS(SHAPEFN_DEVICE_SLOT_CONSTANT)
#undef SHAPEFN_DEVICE_SLOT_CONSTANT

// The slots a VM holds a device for: 0 .. kNumDeviceSlots - 1.
constexpr int kNumDeviceSlots = 2;

// "host", "device", "any"; nullptr for a value that is no slot.
inline const char* DeviceSlotName(int slot) {
#define SHAPEFN_DEVICE_SLOT_CASE(constant, value, name) \
  if (slot == value) return name;
  SHAPEFN_DEVICE_SLOTS(SHAPEFN_DEVICE_SLOT_CASE)
#undef SHAPEFN_DEVICE_SLOT_CASE
  return nullptr;
}

}  // namespace shapefn
