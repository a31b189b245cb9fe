// Pages of their own for one large collect: the plugin writes them, the split hands them back as
// it copies their events into parts.
#ifndef XDL_TRACE_PLUGIN_COLLECT_PAGES_H_
#define XDL_TRACE_PLUGIN_COLLECT_PAGES_H_

#include <cstddef>
#include <string_view>

namespace xdl_trace {
namespace internal {

// An anonymous mapping of `size` bytes: zero until written, with no zero-fill
// pass of ours (a std::string's resize writes every byte before the plugin
// does), and returned to the system a few pages at a time: Release(range)
// drops the whole pages inside the range, so a collect split into parts never
// holds its own bytes and all its parts at once.
// Threading: one thread at a time (the collecting one).
class CollectPages {
 public:
  CollectPages() = default;
  ~CollectPages();
  CollectPages(const CollectPages&) = delete;
  CollectPages& operator=(const CollectPages&) = delete;

  // Maps `size` bytes (> 0), unmapping what was mapped before; false when the
  // system refuses (nothing is mapped then).
  bool Map(size_t size);
  // Unmaps what was mapped (data() is null afterwards).
  void Reset();
  char* data() const { return data_; }
  size_t size() const { return size_; }
  std::string_view view() const { return {data_, size_}; }
  // Hands the whole pages inside [begin, end) (a range of data()) back to the
  // system: they read as zeros afterwards. The partial pages at either end
  // are kept. Bytes of released pages must not be read again.
  void Release(const char* begin, const char* end);
  // Bytes handed back so far (tests).
  size_t released() const { return released_; }

 private:
  char* data_ = nullptr;
  size_t size_ = 0;
  size_t mapped_ = 0;  // size_ rounded up to whole pages.
  size_t released_ = 0;
};

}  // namespace internal
}  // namespace xdl_trace

#endif  // XDL_TRACE_PLUGIN_COLLECT_PAGES_H_
