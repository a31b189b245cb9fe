// Pages of their own for one large collect: the plugin writes them, the split hands them back as
// it copies their events into parts.
#include "plugin/collect_pages.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>

namespace xdl_trace {
namespace internal {
namespace {

size_t PageSize() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

}  // namespace

CollectPages::~CollectPages() { Reset(); }

void CollectPages::Reset() {
  if (data_ != nullptr) munmap(data_, mapped_);
  data_ = nullptr;
  size_ = mapped_ = released_ = 0;
}

bool CollectPages::Map(size_t size) {
  Reset();
  if (size == 0) return false;
  const size_t page = PageSize();
  const size_t mapped = (size + page - 1) / page * page;
  void* m = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return false;
  data_ = static_cast<char*>(m);
  size_ = size;
  mapped_ = mapped;
  return true;
}

void CollectPages::Release(const char* begin, const char* end) {
  if (data_ == nullptr || begin < data_ || end > data_ + size_ || begin >= end) return;
  const size_t page = PageSize();
  const uintptr_t base = reinterpret_cast<uintptr_t>(data_);
  const uintptr_t first = (reinterpret_cast<uintptr_t>(begin) - base + page - 1) / page * page;
  const uintptr_t last = (reinterpret_cast<uintptr_t>(end) - base) / page * page;
  if (first >= last) return;
  // The pages read as zeros afterwards; their memory goes back at once.
  if (madvise(data_ + first, last - first, MADV_DONTNEED) == 0) released_ += last - first;
}

}  // namespace internal
}  // namespace xdl_trace
