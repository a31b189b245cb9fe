// Reading across a trace's files: step selection, Meta-based file skipping, the cursor that merges
// ranks by gstep, torn-tail events, and stacking keys over steps.
#include "xdl_trace/reader/trace_cursor.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "xdl_trace/reader/errors.h"
#include "xdl_trace/reader/file_meta.h"
#include "xdl_trace/reader/options.h"
#include "xdl_trace/reader/record_view.h"
#include "xdl_trace/reader/stack.h"
#include "xdl_trace/reader/trace_file.h"
#include "xdl_trace/reader/trace_reader.h"

namespace xdl_trace {
namespace {

// Marks the NotFound of a missing key (see IsMissingKeyError).
constexpr char kMissingKeyPayload[] = "xdl_trace/missing_key";

// The header index of each of `keys` in `file`; NotFound naming the file, the
// first missing key and the file's keys.
absl::Status IndexKeys(const TraceFile& file, const std::vector<std::string>& keys,
                       std::vector<int>* indices) {
  indices->clear();
  const std::vector<std::string>& file_keys = file.keys();
  indices->reserve(keys.size());
  for (const std::string& key : keys) {
    const std::optional<size_t> index = file.KeyIndex(key);
    if (!index) {
      // A file cut short inside its Header has no keys to name (issue 24 #12).
      const std::string have =
          file.header_torn()
              ? std::string("the file ends inside its Header frame, so it names no key")
          : file_keys.empty() ? std::string("its Header names no key")
                              : absl::StrCat("keys: ", absl::StrJoin(file_keys, ", "));
      absl::Status status =
          absl::NotFoundError(absl::StrCat(file.path(), ": no key '", key, "' (", have, ")"));
      status.SetPayload(kMissingKeyPayload, absl::Cord(key));
      return status;
    }
    indices->push_back(static_cast<int>(*index));
  }
  return absl::OkStatus();
}

// The steps of a selection sorted for binary search.
StepSelection Normalized(StepSelection steps) {
  if (steps.steps) std::sort(steps.steps->begin(), steps.steps->end());
  return steps;
}

// Whether `steps` (Normalized) contains `gstep`.
bool Selected(const StepSelection& steps, int64_t gstep) {
  if ((steps.begin && gstep < *steps.begin) || (steps.end && gstep > *steps.end)) return false;
  return !steps.steps || std::binary_search(steps.steps->begin(), steps.steps->end(), gstep);
}

// What a read of `steps` selects of a file: `steps` itself, or for a file a
// later attempt of its rank superseded (TraceFileInfo::superseded_from) a copy
// in `*clipped` with the end lowered below the cut. Only such a file pays the
// copy (an exact step set can be long).
const StepSelection& OfFile(const StepSelection& steps, const TraceFileInfo& info,
                            StepSelection* clipped) {
  const std::optional<int64_t>& cut = info.superseded_from;
  if (!cut) return steps;
  *clipped = steps;
  if (*cut == std::numeric_limits<int64_t>::min()) {  // Every step: an empty range.
    clipped->begin = std::numeric_limits<int64_t>::max();
    clipped->end = std::numeric_limits<int64_t>::min();
  } else {
    clipped->end = std::min(steps.end.value_or(*cut - 1), *cut - 1);
  }
  return *clipped;
}

}  // namespace

bool IsMissingKeyError(const absl::Status& status) {
  return status.code() == absl::StatusCode::kNotFound &&
         status.GetPayload(kMissingKeyPayload).has_value();
}

std::optional<uint64_t> ReadStartOffset(const TraceFile& file, const StepSelection& steps) {
  const uint64_t first = file.first_record_offset();
  const std::optional<FileMeta>& meta = file.meta();
  // No Meta, or one of a version the cursor refuses (it reports the error).
  if (!meta || !file.version_error().ok() || (!steps.begin && !steps.end)) return first;
  const bool empty = steps.begin && steps.end && *steps.begin > *steps.end;
  const bool outside = (steps.end && meta->gstep_begin > *steps.end) ||
                       (steps.begin && meta->gstep_end < *steps.begin);
  if (meta->format_version == 0) {
    // XDL's Meta: the first and last record's gsteps of the whole finished
    // file; both 0 in an empty .meta (XDL has not finished the file); -1 where
    // XDL never learnt one (a file's begin when it holds one record, both when
    // none): an unknown end proves nothing. record_count is not XDL's: unknown.
    const bool none = meta->gstep_begin == -1 && meta->gstep_end == -1;  // No record at all.
    const bool known = meta->gstep_begin != -1 && meta->gstep_end != -1 &&
                       (meta->gstep_begin != 0 || meta->gstep_end != 0);
    return none || (known && (empty || outside)) ? std::nullopt : std::optional<uint64_t>(first);
  }
  // Our Meta vouches for its first data_bytes: records, if any, in its range.
  const bool disjoint = empty || meta->record_count == 0 || outside;
  if (!disjoint) return first;
  const auto covered = static_cast<uint64_t>(std::max<int64_t>(meta->data_bytes, 0));
  if (covered >= file.size()) return std::nullopt;
  return std::max(covered, first);
}

size_t StackedKey::bytes() const {
  if (!ragged()) return rows.size() * row_bytes();
  size_t total = 0;
  for (const absl::string_view row : rows) total += row.size();
  return total;
}

void StackedKey::CopyRowsTo(char* out) const {
  for (const absl::string_view row : rows) {
    if (row.empty()) continue;  // Keeps memcpy away from null pointers.
    std::memcpy(out, row.data(), row.size());
    out += row.size();
  }
}

// --- TraceCursor -------------------------------------------------------------

// The records of one rank: its files in index order, each from its
// ReadStartOffset.
struct RankStream {
  int32_t rank = 0;
  std::vector<size_t> files;  // Indices into TraceReader::files().
  size_t next_file = 0;
  std::shared_ptr<TraceFile> file;  // The file being read (null between files).
  std::optional<RecordCursor> cursor;
  // What the read selects of `file` (OfFile): the read's options, or `clipped`
  // where `file` is cut (streams stay in place once reading starts).
  const StepSelection* steps = nullptr;
  StepSelection clipped;
  std::vector<int> key_indices;  // Of the selected keys in `file`.
  RecordView decoded;            // Scratch when projecting keys.
  TraceRecord head;              // The next record of this rank.
  bool has_head = false;
  bool stale = true;  // `head` was handed out (or never read): advance first.
  // ReadOptions::interleave: the block the next frame is in, its frames and
  // bytes so far, and whether one of this lane's blocks ended unreported.
  uint64_t block = 0, block_frames = 0, block_bytes = 0;
  bool block_end = false;
};

struct TraceCursor::Impl {
  Impl(TraceReader r, ReadOptions o) : reader(std::move(r)), options(std::move(o)) {}

  TraceReader reader;
  ReadOptions options;
  std::vector<RankStream> streams;
  size_t current = 0;  // The stream whose head record() is.
  TornTail torn_tail;
  uint64_t bytes_read = 0;
  uint64_t end_offset = 0;  // Where the last file's read ended (see end_offset()).
  absl::Status error;
  std::shared_ptr<TraceFile> last_record_file;  // The file of the last record returned.

  enum class Step { kHead, kTorn, kDone, kBlockEnd };

  // Counts a frame walked (decoded or hopped) into the stream's block.
  void CountFrame(RankStream& s, uint64_t frame_size) {
    const ReadOptions::Interleave& lanes = *options.interleave;
    ++s.block_frames;
    s.block_bytes += frame_size;
    if (s.block_frames < lanes.block_frames && s.block_bytes < lanes.block_bytes) return;
    s.block_end = s.block % static_cast<uint64_t>(lanes.lanes) == static_cast<uint64_t>(lanes.lane);
    ++s.block;
    s.block_frames = s.block_bytes = 0;
  }

  // Reads the next selected record of `s` into s.head.
  absl::StatusOr<Step> Advance(RankStream& s) {
    s.has_head = false;
    while (true) {
      if (s.block_end) {  // Before anything of the next block.
        s.block_end = false;
        return Step::kBlockEnd;
      }
      if (!s.cursor) {
        if (s.next_file == s.files.size()) return Step::kDone;
        const size_t index = s.files[s.next_file++];
        XDL_ASSIGN_OR_RETURN(s.file, reader.File(index));
        if (options.keys) XDL_RETURN_IF_ERROR(IndexKeys(*s.file, *options.keys, &s.key_indices));
        s.steps = &OfFile(options.steps, reader.files()[index], &s.clipped);
        std::optional<uint64_t> start = ReadStartOffset(*s.file, *s.steps);
        end_offset = options.start_offset.value_or(0);  // Where a Meta-skipped file stands.
        if (!start) continue;
        if (options.start_offset) start = std::max(*start, *options.start_offset);
        s.cursor.emplace(s.file);
        s.cursor->Seek(*start);
        s.head.file = index;
        s.head.rank = s.rank;
        s.head.keys = options.keys ? &*options.keys : &s.file->keys();
      }
      if (options.interleave && s.block % static_cast<uint64_t>(options.interleave->lanes) !=
                                    static_cast<uint64_t>(options.interleave->lane)) {
        uint64_t frame_size = 0;
        if (s.cursor->Skip(&frame_size)) {  // Another lane's block.
          bytes_read += frame_size;
          CountFrame(s, frame_size);
          continue;
        }
      } else if (RecordView& target = options.keys ? s.decoded : s.head.view;
                 s.cursor->Next(&target)) {
        bytes_read += target.frame_size;
        if (options.interleave) CountFrame(s, target.frame_size);
        if (!Selected(*s.steps, target.gstep)) continue;
        const bool no_keys = options.keys && options.keys->empty();
        s.head.device_only = IsDeviceOnlyRecord(target, s.file->keys().size());
        if (s.head.device_only && !no_keys && !options.device_only_records) continue;
        if (options.keys) Project(s.decoded, s.key_indices, &s.head.view);
        s.has_head = true;
        return Step::kHead;
      }
      XDL_RETURN_IF_ERROR(s.cursor->status());
      const bool torn = s.cursor->torn_tail();
      const uint64_t torn_offset = s.cursor->torn_offset();
      end_offset = s.cursor->offset();  // A torn frame's start: not walked past.
      s.cursor.reset();
      if (torn) {
        torn_tail = s.file->TornTailAt(torn_offset, s.rank);
        return Step::kTorn;
      }
    }
  }

  // The selected columns of `from`, in selection order (none of a device-only record).
  static void Project(const RecordView& from, const std::vector<int>& indices, RecordView* to) {
    to->gstep = from.gstep;
    to->lstep = from.lstep;
    to->timestamp_ms = from.timestamp_ms;
    to->offset = from.offset;
    to->frame_size = from.frame_size;
    to->extra_fields = from.extra_fields;
    if (from.columns.empty()) {
      to->columns.clear();
      return;
    }
    to->columns.resize(indices.size());
    for (size_t i = 0; i < indices.size(); ++i) to->columns[i] = from.columns[indices[i]];
  }

  absl::StatusOr<Event> Next() {
    // Advance lazily, as heapq.merge does: first every rank (in rank order),
    // later only the rank whose record was handed out last.
    for (RankStream& s : streams) {
      if (!s.stale) continue;
      XDL_ASSIGN_OR_RETURN(const Step step, Advance(s));
      // `s` stays stale after these: it goes on next time.
      if (step == Step::kTorn) return Event::kTornTail;
      if (step == Step::kBlockEnd) return Event::kBlockEnd;
      s.stale = false;
    }
    const RankStream* best = nullptr;
    for (const RankStream& s : streams) {
      if (!s.has_head) continue;
      if (best == nullptr || s.head.view.gstep < best->head.view.gstep) best = &s;
    }
    if (best == nullptr) return Event::kEnd;
    current = static_cast<size_t>(best - streams.data());
    streams[current].stale = true;
    return Event::kRecord;
  }
};

TraceCursor::TraceCursor(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TraceCursor::TraceCursor(TraceCursor&&) noexcept = default;
TraceCursor& TraceCursor::operator=(TraceCursor&&) noexcept = default;
TraceCursor::~TraceCursor() = default;

absl::StatusOr<TraceCursor::Event> TraceCursor::Next() {
  XDL_RETURN_IF_ERROR(impl_->error);
  absl::StatusOr<Event> event = impl_->Next();
  if (!event.ok()) impl_->error = event.status();
  if (event.ok() && *event == Event::kRecord) {
    const std::shared_ptr<TraceFile>& file = impl_->streams[impl_->current].file;
    if (impl_->last_record_file != file) impl_->last_record_file = file;
  }
  return event;
}

absl::Status TraceCursor::CheckNotCut() {
  XDL_RETURN_IF_ERROR(impl_->error);
  if (impl_->last_record_file != nullptr) impl_->error = impl_->last_record_file->CheckNotCut();
  return impl_->error;
}

const TraceRecord& TraceCursor::record() const { return impl_->streams[impl_->current].head; }
const TornTail& TraceCursor::torn_tail() const { return impl_->torn_tail; }
uint64_t TraceCursor::bytes_read() const { return impl_->bytes_read; }
uint64_t TraceCursor::end_offset() const { return impl_->end_offset; }
uint64_t TraceCursor::block() const {
  return impl_->streams.empty() ? 0 : impl_->streams.front().block;
}

TraceCursor TraceReader::Read(ReadOptions options) const {
  auto impl = std::make_unique<TraceCursor::Impl>(*this, std::move(options));
  impl->options.steps = Normalized(std::move(impl->options.steps));
  const std::optional<std::vector<int32_t>>& wanted = impl->options.ranks;
  for (int32_t rank : ranks()) {  // Ascending: ties in gstep go to the lower rank.
    if (wanted && std::find(wanted->begin(), wanted->end(), rank) == wanted->end()) continue;
    RankStream stream;
    stream.rank = rank;
    for (size_t i = 0; i < files().size(); ++i) {
      if (files()[i].rank == rank) stream.files.push_back(i);
    }
    impl->streams.push_back(std::move(stream));
  }
  size_t files = 0;
  for (const RankStream& stream : impl->streams) files += stream.files.size();
  if (impl->options.start_offset && files > 1) {
    impl->error = absl::InvalidArgumentError(
        absl::StrCat("start_offset ", *impl->options.start_offset,
                     " is for a read of one file; this one selects ", files));
  }
  if (const auto& lanes = impl->options.interleave) {
    if (impl->streams.size() > 1) {
      impl->error = absl::InvalidArgumentError(absl::StrCat(
          "an interleaved read needs one rank; this one selects ", impl->streams.size()));
    } else if (lanes->lanes < 1 || lanes->lane < 0 || lanes->lane >= lanes->lanes ||
               lanes->block_frames < 1) {
      impl->error = absl::InvalidArgumentError(absl::StrCat("interleave: lane ", lanes->lane,
                                                            " of ", lanes->lanes, ", blocks of ",
                                                            lanes->block_frames, " frames"));
    }
  }
  return TraceCursor(std::move(impl));
}

// --- Stack -------------------------------------------------------------------

absl::StatusOr<StackResult> TraceReader::Stack(std::optional<std::vector<std::string>> keys,
                                               const StepSelection& steps,
                                               std::optional<int32_t> rank, bool ragged) const {
  if (!rank) {
    const std::vector<int32_t> all = ranks();
    if (all.size() > 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("stack: the trace has ranks [", absl::StrJoin(all, ", "), "]; pass rank="));
    }
    rank = all.empty() ? 0 : all[0];
  }
  if (!keys) {
    XDL_ASSIGN_OR_RETURN(keys, Keys());
  }
  const StepSelection selection = Normalized(steps);
  StackResult result;
  result.keys.resize(keys->size());
  for (size_t k = 0; k < keys->size(); ++k) result.keys[k].key = (*keys)[k];
  std::vector<int> indices;
  RecordView record;
  for (size_t i = 0; i < files().size(); ++i) {
    if (files()[i].rank != *rank) continue;
    XDL_ASSIGN_OR_RETURN(std::shared_ptr<TraceFile> file, File(i));
    XDL_RETURN_IF_ERROR(IndexKeys(*file, *keys, &indices));
    StepSelection clipped;
    const StepSelection& file_steps = OfFile(selection, files()[i], &clipped);
    const std::optional<uint64_t> start = ReadStartOffset(*file, file_steps);
    if (!start) continue;
    RecordCursor cursor = file->Records();
    cursor.Seek(*start);
    while (cursor.Next(&record)) {
      if (!Selected(file_steps, record.gstep)) continue;
      if (IsDeviceOnlyRecord(record, file->keys().size())) continue;
      for (size_t k = 0; k < indices.size(); ++k) {
        const ColumnView& column = record.columns[indices[k]];
        if (column.empty()) continue;
        StackedKey& stacked = result.keys[k];
        // A dtype newer than this reader stacks as its raw bytes, one row each.
        const Shape shape =
            column.known_dtype() ? column.shape : Shape{static_cast<int64_t>(column.data.size())};
        if (stacked.rows.empty()) {
          stacked.dtype = column.dtype;
          stacked.shape = shape;
        } else if (column.dtype != stacked.dtype || shape.size() != stacked.shape.size() ||
                   (shape != stacked.shape && !ragged)) {
          return absl::InvalidArgumentError(absl::StrCat(
              file->path(), ": key '", stacked.key, "' changes dtype or shape at gstep ",
              record.gstep, " (byte offset ", record.offset, ") from ", DTypeName(stacked.dtype),
              "[", absl::StrJoin(stacked.shape, ", "), "] to ", DTypeName(column.dtype), "[",
              absl::StrJoin(shape, ", "), "]; ",
              ragged ? "a ragged stack keeps one dtype and number of dimensions"
                     : "stack needs one shape: read such a key record by record"));
        }
        if (!stacked.ragged() && shape != stacked.shape) {  // The first change: every row so far.
          stacked.row_shapes.assign(stacked.rows.size(), stacked.shape);
        }
        if (stacked.ragged()) stacked.row_shapes.push_back(shape);
        stacked.gsteps.push_back(record.gstep);
        stacked.rows.push_back(column.data);
      }
    }
    XDL_RETURN_IF_ERROR(cursor.status());
    if (cursor.torn_tail()) {
      result.torn_tails.push_back(file->TornTailAt(cursor.torn_offset(), *rank));
    }
    result.files.push_back(std::move(file));
  }
  return result;
}

}  // namespace xdl_trace
