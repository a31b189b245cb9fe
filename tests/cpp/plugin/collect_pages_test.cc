// CollectPages: a collect's own pages, handed back whole pages at a time.
#include "plugin/collect_pages.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>

namespace xdl_trace {
namespace internal {
namespace {

TEST_CASE("collect pages: written, then handed back whole pages inside a range", "[plugin]") {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  CollectPages pages;
  CHECK(pages.data() == nullptr);
  CHECK_FALSE(pages.Map(0));
  const size_t size = 10 * page + 17;  // Not a whole number of pages.
  REQUIRE(pages.Map(size));
  REQUIRE(pages.size() == size);
  CHECK(pages.view().size() == size);
  char* data = pages.data();
  CHECK(data[size - 1] == 0);  // Zero until written.
  std::memset(data, 0x5a, size);
  // [100, 5 pages + 10): only pages 1 to 4 lie wholly inside.
  pages.Release(data + 100, data + 5 * page + 10);
  CHECK(pages.released() == 4 * page);
  auto all = [&](size_t begin, size_t end, char value) {
    for (size_t i = begin; i < end; ++i) {
      if (data[i] != value) return false;
    }
    return true;
  };
  CHECK(all(0, page, 0x5a));
  CHECK(all(page, 5 * page, 0));
  CHECK(all(5 * page, size, 0x5a));
  // Less than a page, an empty range and a range outside: nothing.
  pages.Release(data + 6 * page + 1, data + 7 * page - 1);
  pages.Release(data + 8 * page, data + 8 * page);
  pages.Release(data - page, data + page);
  pages.Release(data + 9 * page, data + size + page);
  CHECK(pages.released() == 4 * page);
  CHECK(all(5 * page, size, 0x5a));
  // Up to the end: the last partial page stays.
  pages.Release(data + 8 * page, data + size);
  CHECK(pages.released() == 6 * page);
  CHECK(all(10 * page, size, 0x5a));
  pages.Reset();
  CHECK(pages.data() == nullptr);
  CHECK(pages.size() == 0);
}

}  // namespace
}  // namespace internal
}  // namespace xdl_trace
