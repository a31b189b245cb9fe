// The SIGBUS handler behind MappingGuard: zero pages over a mapping whose file shrank.
#include "reader/mapping_guard.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <mutex>

namespace xdl_trace {
namespace internal {
namespace {

constexpr int kSlots = 1024;

// One guarded mapping. Written by Register/Unregister, read by the handler
// (any thread, any time): atomics only, no lock.
struct Slot {
  std::atomic<uintptr_t> begin{0};  // 0: free.
  std::atomic<uintptr_t> end{0};
  std::atomic<bool> cut{false};
};

Slot slots[kSlots];
struct sigaction previous_action;  // Written once, before the handler is installed.
uintptr_t page_bytes = 4096;       // Likewise.
std::once_flag install_once;

void OnSigbus(int signal, siginfo_t* info, void* context) {
  const auto addr = reinterpret_cast<uintptr_t>(info->si_addr);
  for (Slot& slot : slots) {
    const uintptr_t begin = slot.begin.load(std::memory_order_acquire);
    const uintptr_t end = slot.end.load(std::memory_order_acquire);
    if (begin == 0 || addr < begin || addr >= end) continue;
    const uintptr_t from = addr & ~(page_bytes - 1);
    const uintptr_t to = (end + page_bytes - 1) & ~(page_bytes - 1);
    // Anonymous zero pages in place of the lost ones: the access is retried and reads zeros.
    if (mmap(reinterpret_cast<void*>(from), to - from, PROT_READ,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != MAP_FAILED) {
      slot.cut.store(true, std::memory_order_release);
      return;
    }
    break;
  }
  // Not ours: what the process did before us.
  if ((previous_action.sa_flags & SA_SIGINFO) != 0 && previous_action.sa_sigaction != nullptr) {
    previous_action.sa_sigaction(signal, info, context);
  } else if (previous_action.sa_handler != SIG_DFL && previous_action.sa_handler != SIG_IGN) {
    previous_action.sa_handler(signal);
  } else {
    struct sigaction fallback = {};
    fallback.sa_handler = SIG_DFL;
    sigaction(signal, &fallback, nullptr);  // The fault repeats on return and ends the process.
  }
}

void Install() {
  page_bytes = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  struct sigaction action = {};
  action.sa_sigaction = OnSigbus;
  action.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  sigaction(SIGBUS, &action, &previous_action);
}

}  // namespace

int MappingGuard::Register(const char* begin, size_t size) {
  if (begin == nullptr || size == 0) return -1;
  std::call_once(install_once, Install);
  const auto b = reinterpret_cast<uintptr_t>(begin);
  for (int i = 0; i < kSlots; ++i) {
    uintptr_t expected = 0;
    // Claim the slot with a marker no address matches, then publish the range.
    if (!slots[i].begin.compare_exchange_strong(expected, UINTPTR_MAX)) continue;
    slots[i].cut.store(false, std::memory_order_relaxed);
    slots[i].end.store(b + size, std::memory_order_release);
    slots[i].begin.store(b, std::memory_order_release);
    return i;
  }
  return -1;
}

void MappingGuard::Unregister(int slot) {
  if (slot < 0) return;
  slots[slot].end.store(0, std::memory_order_release);
  slots[slot].begin.store(0, std::memory_order_release);
}

bool MappingGuard::Cut(int slot) {
  return slot >= 0 && slots[slot].cut.load(std::memory_order_acquire);
}

}  // namespace internal
}  // namespace xdl_trace
