// The C side of dlpack-tch: libtorch's own DLPack converter (ATen/DLConvertor.h) behind
// three C functions that never let a C++ exception out. Every function reports failure
// by returning non-zero with a one-line message (no backtrace) in the caller's buffer.

#include <ATen/ATen.h>
#include <ATen/DLConvertor.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <unordered_set>

namespace {

// Copies the first line of `message` into `buffer` (NUL-terminated, truncated to fit).
void write_message(const char* message, char* buffer, std::size_t size) noexcept {
  if (buffer == nullptr || size == 0) {
    return;
  }
  std::size_t n = 0;
  while (message[n] != '\0' && message[n] != '\n' && n + 1 < size) {
    buffer[n] = message[n];
    ++n;
  }
  buffer[n] = '\0';
}

// The message of the exception in flight, without libtorch's backtrace.
void describe_current_exception(char* buffer, std::size_t size) noexcept {
  try {
    throw;
  } catch (const c10::Error& e) {
    write_message(e.what_without_backtrace(), buffer, size);
  } catch (const std::bad_alloc&) {
    write_message("out of memory", buffer, size);
  } catch (const std::exception& e) {
    write_message(e.what(), buffer, size);
  } catch (...) {
    write_message("unknown C++ exception", buffer, size);
  }
}

// The storages that torch made over an exclusive tensor handed over without a copy: the
// memory is not torch's, but nothing outside torch reaches it. An entry lives exactly as
// long as the memory is the storage's (the `Owner` below removes it when the storage lets
// go of the memory). Allocated once and never freed, so that storages still alive when
// the process exits never find it destroyed.
struct Registry {
  std::mutex mutex;
  std::unordered_set<const void*> storages;
};

Registry& registry() {
  static Registry* registry = new Registry();
  return *registry;
}

// Calls the producer's deleter exactly once: when the last copy of the `shared_ptr`
// that holds it dies, whether that is the storage of a torch tensor or the unwinding of
// a failed conversion.
struct Owner {
  DLManagedTensorVersioned* tensor;
  // The storage registered over this tensor's memory, or null.
  const void* storage = nullptr;
  explicit Owner(DLManagedTensorVersioned* t) noexcept : tensor(t) {}
  Owner(const Owner&) = delete;
  Owner& operator=(const Owner&) = delete;
  ~Owner() {
    if (storage != nullptr) {
      Registry& r = registry();
      std::lock_guard<std::mutex> lock(r.mutex);
      r.storages.erase(storage);
    }
    if (tensor->deleter != nullptr) {
      tensor->deleter(tensor);
    }
  }
};

// Whether the memory of `storage` is reachable only through torch: memory torch's own
// allocator made for it (a resizable storage whose data pointer is the allocator's), or
// an exclusive tensor handed to torch without a copy. Not memory torch borrows from
// elsewhere (`from_numpy`, `from_blob`, `from_dlpack` of another producer, a file map),
// which may be unique in torch and still reachable by its owner.
bool torch_owns(const c10::Storage& storage) {
  const c10::Allocator* allocator = storage.allocator();
  if (storage.resizable() && allocator != nullptr && allocator->raw_deleter() != nullptr &&
      storage.data_ptr().get_deleter() == allocator->raw_deleter()) {
    return true;
  }
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.storages.count(storage.unsafeGetStorageImpl()) != 0;
}

}  // namespace

extern "C" {

// Takes ownership of `src` and makes a torch tensor of its data, stored in `*out` as a
// heap-allocated `at::Tensor` (what tch's `Tensor::from_ptr` takes).
//
// - `byte_offset` is folded into the data pointer before ATen sees the header (ATen
//   ignores it);
// - with `copy` set, the result is a copy (`clone`) and `src` is released before this
//   returns;
// - `src`'s deleter runs exactly once: when torch frees the storage, or before this
//   returns if the conversion fails or copies.
int dlpack_tch_from_dlpack(DLManagedTensorVersioned* src, int copy, void** out,
                           char* message, std::size_t message_size) noexcept {
  std::shared_ptr<Owner> owner;
  try {
    owner = std::make_shared<Owner>(src);
  } catch (...) {
    describe_current_exception(message, message_size);
    if (src->deleter != nullptr) {
      src->deleter(src);
    }
    return 1;
  }
  try {
    DLManagedTensorVersioned header = *src;
    header.dl_tensor.data =
        static_cast<char*>(src->dl_tensor.data) + src->dl_tensor.byte_offset;
    header.dl_tensor.byte_offset = 0;
    // The deleter ATen keeps holds a reference to `owner`; its body has nothing to do,
    // since releasing the last reference is what calls the producer's deleter.
    at::Tensor tensor = at::fromDLPackVersioned(&header, [owner](void*) {});
    if (copy != 0) {
      tensor = tensor.clone();
    } else {
      // The caller hands over only exclusive tensors without a copy.
      const void* storage = tensor.storage().unsafeGetStorageImpl();
      Registry& r = registry();
      std::lock_guard<std::mutex> lock(r.mutex);
      r.storages.insert(storage);
      owner->storage = storage;
    }
    *out = new at::Tensor(std::move(tensor));
    return 0;
  } catch (...) {
    describe_current_exception(message, message_size);
    return 1;
  }
}

// Exports `*tensor` (an `at::Tensor`, left untouched) through `at::toDLPackVersioned`:
// the header keeps a reference to the tensor's storage until its deleter runs.
// `*unique` says whether `*tensor` was the only handle of its storage, and the storage
// the only way to reach its memory, so that the export, once the caller drops its
// tensor, is the only way to reach the data.
int dlpack_tch_to_dlpack(const void* tensor, DLManagedTensorVersioned** out, int* unique,
                         char* message, std::size_t message_size) noexcept {
  try {
    const at::Tensor& t = *static_cast<const at::Tensor*>(tensor);
    if (!t.defined()) {
      throw std::invalid_argument("the tensor is undefined");
    }
    if (t.requires_grad()) {
      throw std::invalid_argument(
          "the tensor requires grad: export `tensor.detach()` (torch refuses it too)");
    }
    if (t.is_conj()) {
      throw std::invalid_argument(
          "the tensor has its conjugate bit set: export `tensor.resolve_conj()`");
    }
    if (t.is_neg()) {
      throw std::invalid_argument(
          "the tensor has its negative bit set: export `tensor.resolve_neg()`");
    }
    if (t.layout() != at::kStrided) {
      throw std::invalid_argument("only strided (dense) tensors can be exported");
    }
    // The only handle: no other tensor shares this one's implementation or storage, no
    // weak reference could be promoted to one later (the weak count is the strong
    // references' own plus the one made here), the memory is torch's alone, and it is
    // not pinned host memory, which a device copy may still be writing (nothing here
    // waits for it).
    const c10::Storage& storage = t.storage();
    const bool only =
        t.use_count() == 1 && storage.use_count() == 1 &&
        storage.getWeakStorageImpl().weak_use_count() == 2 && !t.is_pinned();
    *unique = (only && torch_owns(storage)) ? 1 : 0;
    *out = at::toDLPackVersioned(t);
    return 0;
  } catch (...) {
    describe_current_exception(message, message_size);
    return 1;
  }
}

// Maps a DLPack device to torch's (type and index) the way ATen's converter does,
// without touching memory: for tests and error messages.
int dlpack_tch_device(int32_t device_type, int32_t device_id, int* torch_type,
                      int* torch_index, char* message, std::size_t message_size) noexcept {
  try {
    at::Device device = at::dlDeviceToTorchDevice(
        static_cast<DLDeviceType>(device_type), static_cast<c10::DeviceIndex>(device_id));
    *torch_type = static_cast<int>(device.type());
    *torch_index = static_cast<int>(device.index());
    return 0;
  } catch (...) {
    describe_current_exception(message, message_size);
    return 1;
  }
}

}  // extern "C"
