// Thin shims over the C++ reader: numpy arrays that view the file mapping, GIL released while
// reading, Meta turned into a dict by protobuf reflection.
#include "reader_bindings.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cctype>
#include <cstring>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "status.h"
#include "xdl_trace.pb.h"
#include "xdl_trace/reader/errors.h"
#include "xdl_trace/reader/file_meta.h"
#include "xdl_trace/reader/file_names.h"
#include "xdl_trace/reader/options.h"
#include "xdl_trace/reader/record_view.h"
#include "xdl_trace/reader/runs.h"
#include "xdl_trace/reader/stack.h"
#include "xdl_trace/reader/trace_cursor.h"
#include "xdl_trace/reader/trace_file.h"
#include "xdl_trace/reader/trace_reader.h"

namespace py = pybind11;

namespace xdl_trace {
namespace python {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

// numpy dtype per wire dtype, from the dtype table (GetDTypeInfo); uint8 (raw
// bytes) for a dtype newer than this reader.
const py::dtype& NumpyDType(DType dtype) {
  static const py::dtype* raw_bytes = new py::dtype("uint8");  // Never destroyed, as below.
  if (!IsValidDType(static_cast<int32_t>(dtype))) return *raw_bytes;
  // Created once with the GIL held and never destroyed (no teardown order issues).
  static const std::vector<py::dtype>* table = [] {
    auto* t = new std::vector<py::dtype>();
    for (int32_t d = 0; d < kNumDTypes; ++d) {
      t->push_back(py::dtype(GetDTypeInfo(static_cast<DType>(d)).numpy_name));
    }
    return t;
  }();
  return (*table)[static_cast<size_t>(dtype)];
}

// Raises KeyError for a missing key, else as ThrowIfError does.
void ThrowReadError(const absl::Status& status) {
  if (IsMissingKeyError(status)) throw py::key_error(std::string(status.message()));
  ThrowIfError(status);
}

// Runs `call` (returning absl::StatusOr<T>) without the GIL; raises as ThrowReadError.
template <typename Call>
auto ReadWithoutGil(const Call& call) {
  auto result = [&] {
    py::gil_scoped_release release;
    return call();
  }();
  ThrowReadError(result.status());
  return *std::move(result);
}

// --- Meta: every field of the .proto, by reflection --------------------------

py::dict MessageToDict(const Message& message);

py::object FieldToPython(const Message& message, const FieldDescriptor* field, int index) {
  const auto* r = message.GetReflection();
  const bool repeated = field->is_repeated();
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      return py::int_(repeated ? r->GetRepeatedInt32(message, field, index)
                               : r->GetInt32(message, field));
    case FieldDescriptor::CPPTYPE_INT64:
      return py::int_(repeated ? r->GetRepeatedInt64(message, field, index)
                               : r->GetInt64(message, field));
    case FieldDescriptor::CPPTYPE_UINT32:
      return py::int_(repeated ? r->GetRepeatedUInt32(message, field, index)
                               : r->GetUInt32(message, field));
    case FieldDescriptor::CPPTYPE_UINT64:
      return py::int_(repeated ? r->GetRepeatedUInt64(message, field, index)
                               : r->GetUInt64(message, field));
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return py::float_(repeated ? r->GetRepeatedDouble(message, field, index)
                                 : r->GetDouble(message, field));
    case FieldDescriptor::CPPTYPE_FLOAT:
      return py::float_(repeated ? r->GetRepeatedFloat(message, field, index)
                                 : r->GetFloat(message, field));
    case FieldDescriptor::CPPTYPE_BOOL:
      return py::bool_(repeated ? r->GetRepeatedBool(message, field, index)
                                : r->GetBool(message, field));
    case FieldDescriptor::CPPTYPE_ENUM:
      return py::int_(repeated ? r->GetRepeatedEnumValue(message, field, index)
                               : r->GetEnumValue(message, field));
    case FieldDescriptor::CPPTYPE_STRING: {
      const std::string value =
          repeated ? r->GetRepeatedString(message, field, index) : r->GetString(message, field);
      if (field->type() == FieldDescriptor::TYPE_BYTES) return py::bytes(value);
      return py::str(value);
    }
    case FieldDescriptor::CPPTYPE_MESSAGE:
      return MessageToDict(repeated ? r->GetRepeatedMessage(message, field, index)
                                    : r->GetMessage(message, field));
  }
  return py::none();
}

// {field name: value} for every field of the message's descriptor, in field
// order (unset proto3 fields give their defaults, as the Python API expects).
py::dict MessageToDict(const Message& message) {
  py::dict d;
  const auto* descriptor = message.GetDescriptor();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const FieldDescriptor* field = descriptor->field(i);
    if (field->is_repeated()) {
      py::list values;
      const int size = message.GetReflection()->FieldSize(message, field);
      for (int j = 0; j < size; ++j) values.append(FieldToPython(message, field, j));
      d[py::str(field->name())] = std::move(values);
    } else {
      d[py::str(field->name())] = FieldToPython(message, field, -1);
    }
  }
  return d;
}

py::dict MetaToDict(const FileMeta& meta) {
  xdl::proto::Meta message;
  message.ParseFromString(meta.serialized);  // ParseFileMeta checked it.
  return MessageToDict(message);
}

// A RunSummary as a dict; each rank's RunInfo as a dict by reflection (as Meta).
py::dict RunToDict(const RunSummary& run) {
  py::dict d;
  d["run_id"] = run.run_id;
  d["files"] = run.files;
  d["ranks"] = run.ranks;
  d["records"] = run.records;
  d["gsteps"] = run.has_steps ? py::object(py::make_tuple(run.gstep_begin, run.gstep_end))
                              : py::object(py::none());
  d["start_time_ms"] = run.start_time_ms;
  d["end_time_ms"] = run.end_time_ms;
  d["closed_cleanly"] = run.closed_cleanly;
  d["attempts"] = run.attempts;
  py::list resumes;
  for (const RunSummary::Resume& resume : run.resumes) {
    resumes.append(py::dict(py::arg("rank") = resume.rank, py::arg("attempt") = resume.attempt,
                            py::arg("gstep") = resume.gstep));
  }
  d["resumes"] = resumes;
  py::list infos;
  for (const std::string& serialized : run.run_infos) {
    if (serialized.empty()) {
      infos.append(py::none());
      continue;
    }
    xdl::proto::RunInfo info;
    info.ParseFromString(serialized);  // Runs() parsed it.
    infos.append(MessageToDict(info));
  }
  d["run_infos"] = infos;
  return d;
}

// --- Files -------------------------------------------------------------------

// A TraceFile plus a read-only uint8 array over its whole mapping. Every
// column array is a view with that array as its base, so the mapping lives as
// long as any array read from it.
struct PyTraceFile {
  std::shared_ptr<TraceFile> file;
  py::array mapping;
};

py::array MappingArray(const std::shared_ptr<TraceFile>& file) {
  static const char kEmpty = 0;
  auto* owner = new std::shared_ptr<TraceFile>(file);
  py::capsule keep_alive(owner,
                         [](void* p) { delete static_cast<std::shared_ptr<TraceFile>*>(p); });
  const char* data = file->size() > 0 ? file->bytes().data() : &kEmpty;
  py::array array(py::dtype("uint8"), {static_cast<py::ssize_t>(file->size())}, {}, data,
                  keep_alive);
  py::detail::array_proxy(array.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
  return array;
}

// The wire name of a dtype: "float32", ..., "unknown(14)" for one newer than this reader.
std::string DTypeLabel(DType dtype) {
  if (IsValidDType(static_cast<int32_t>(dtype))) return std::string(DTypeName(dtype));
  return "unknown(" + std::to_string(static_cast<int32_t>(dtype)) + ")";
}

// Widens `n` bfloat16 values (their uint16 bits, little-endian) to float32:
// the bits are the upper half of the float's.
void WidenBFloat16(const char* bits, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i) {
    uint16_t b;
    std::memcpy(&b, bits + 2 * i, 2);
    const uint32_t widened = static_cast<uint32_t>(b) << 16;
    std::memcpy(out + i, &widened, 4);
  }
}

void MakeReadOnly(py::array& array) {
  py::detail::array_proxy(array.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
}

// A column as an array viewing the mapping; a dtype newer than this reader as
// its raw bytes (flat uint8: the shape's element size is unknown). Unless
// `raw`, a bfloat16 column is widened to a (read-only) float32 copy.
py::array ColumnArray(const PyTraceFile& file, const ColumnView& column, bool raw) {
  std::vector<py::ssize_t> shape;
  if (column.empty()) {
    shape.push_back(0);
  } else if (!column.known_dtype()) {
    shape.push_back(static_cast<py::ssize_t>(column.data.size()));
  } else {
    shape.assign(column.shape.begin(), column.shape.end());
  }
  if (!raw && column.dtype == DType::kBFloat16) {
    py::array_t<float> widened(shape);
    if (!column.empty()) {
      WidenBFloat16(column.data.data(), column.data.size() / 2, widened.mutable_data());
    }
    py::array out = std::move(widened);
    MakeReadOnly(out);
    return out;
  }
  const char* data = column.data.data() != nullptr ? column.data.data() : file.file->bytes().data();
  if (data == nullptr) return py::array(NumpyDType(column.dtype), shape);
  return py::array(NumpyDType(column.dtype), shape, {}, data, file.mapping);
}

py::tuple ShapeTuple(const Shape& shape);

// A proto enum value's name in lower case ("stats", "gradient"), from the
// generated descriptor; "unknown(N)" for a value newer than this reader.
std::string EnumLabel(const google::protobuf::EnumDescriptor* descriptor, int32_t value) {
  const google::protobuf::EnumValueDescriptor* named = descriptor->FindValueByNumber(value);
  if (named == nullptr) return "unknown(" + std::to_string(value) + ")";
  std::string name = named->name();
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name;
}

// A column descriptor as {"kind", "source", "layout_version", "histogram_bins",
// "summary_name", "input_dtype", "input_shape"}; kind and source are the
// .proto's enum names in lower case ("value", "stats", "histogram",
// "user_summary"; "content_unspecified" when the writer left it unset), the
// input's dtype and shape None when the writer did not know them.
py::dict ColumnInfoToDict(const ColumnInfo& info) {
  using xdl::proto::ColumnDescriptor;
  py::dict d;
  d["kind"] = EnumLabel(ColumnDescriptor::Content_descriptor(), static_cast<int32_t>(info.content));
  d["source"] = EnumLabel(ColumnDescriptor::Source_descriptor(), static_cast<int32_t>(info.source));
  d["layout_version"] = info.layout_version;
  d["histogram_bins"] = info.histogram_bins;
  d["summary_name"] = info.summary_name;
  d["input_dtype"] =
      info.has_input ? py::object(py::str(DTypeLabel(info.input_dtype))) : py::none();
  d["input_shape"] = info.has_input ? py::object(ShapeTuple(info.input_shape)) : py::none();
  return d;
}

// The file's column descriptors as dicts, or None when its Header has none.
py::object ColumnsOf(const TraceFile& file) {
  if (file.columns().empty()) return py::none();
  py::list out;
  for (const ColumnInfo& info : file.columns()) out.append(ColumnInfoToDict(info));
  return std::move(out);
}

py::dict VerifyToDict(const VerifyReport& r) {
  py::dict d;
  d["ok"] = r.ok;
  d["has_meta"] = r.has_meta;
  d["file_bytes"] = r.file_bytes;
  d["meta_data_bytes"] = r.meta_data_bytes;
  d["meta_record_count"] = r.meta_record_count;
  d["records_counted"] = r.records_counted;
  d["records_read"] = r.records_read;
  d["crc_expected"] = r.crc_expected;
  d["crc_actual"] = r.crc_actual;
  d["unverified_tail_bytes"] = r.unverified_tail_bytes;
  d["torn_tail"] = r.torn_tail;
  d["unverifiable"] = r.unverifiable;
  d["note"] = r.note;
  d["problems"] = r.problems;
  return d;
}

py::tuple ShapeTuple(const Shape& shape) {
  py::tuple out(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) out[i] = shape[i];
  return out;
}

// --- Traces ------------------------------------------------------------------

// A TraceReader plus one PyTraceFile per file, made at first use, so every
// array read from a file shares one mapping array.
struct PyTraceReader {
  TraceReader reader;
  std::vector<std::optional<PyTraceFile>> files;  // One slot per reader.files() entry.

  const PyTraceFile& File(size_t index) {
    std::optional<PyTraceFile>& slot = files.at(index);  // Sized at open; IndexError past it.
    if (!slot) {
      std::shared_ptr<TraceFile> file = ReadWithoutGil([&] { return reader.File(index); });
      slot = PyTraceFile{file, MappingArray(file)};
    }
    return *slot;
  }
};

StepSelection Steps(std::optional<int64_t> begin, std::optional<int64_t> end,
                    std::optional<std::vector<int64_t>> steps) {
  return StepSelection{begin, end, std::move(steps)};
}

// A TraceCursor handing out records in batches (one GIL round trip each).
struct PyTraceCursor {
  std::shared_ptr<PyTraceReader> owner;
  TraceCursor cursor;
  std::unordered_map<const std::vector<std::string>*, std::vector<py::str>> key_names;
  std::set<std::pair<size_t, int32_t>> unknown_dtypes;  // (file, dtype) already reported.
  bool raw = false;  // Keep bfloat16 columns as their uint16 bits.

  const std::vector<py::str>& KeyNames(const std::vector<std::string>* keys) {
    auto [it, added] = key_names.try_emplace(keys);
    if (added) {
      for (const std::string& k : *keys) it->second.emplace_back(k);
    }
    return it->second;
  }
};

// Up to `max_records` records, as (gstep, lstep, timestamp_ms, {key: array},
// extra, file index, offset) tuples, then the TornTail that ended the batch (or
// None), whether the read is over, and the (file index, dtype) pairs of dtypes
// newer than this reader met for the first time (read as raw bytes). An error
// is raised once the records before it were returned.
py::tuple NextBatch(PyTraceCursor& self, int64_t max_records) {
  std::vector<TraceRecord> records;
  std::optional<TornTail> torn;
  bool done = false;
  absl::Status status;
  {
    py::gil_scoped_release release;
    status = self.cursor.CheckNotCut();  // The last batch's arrays, read since.
    while (status.ok() && static_cast<int64_t>(records.size()) < max_records) {
      absl::StatusOr<TraceCursor::Event> event = self.cursor.Next();
      if (!event.ok()) {
        status = event.status();
        break;
      }
      if (*event == TraceCursor::Event::kEnd) {
        done = true;
        break;
      }
      if (*event == TraceCursor::Event::kTornTail) {
        torn = self.cursor.torn_tail();
        break;
      }
      records.push_back(self.cursor.record());
    }
  }
  if (!status.ok() && records.empty()) ThrowReadError(status);  // Else raised by the next call.
  py::list out(records.size());
  py::list unknown;
  for (size_t i = 0; i < records.size(); ++i) {
    const TraceRecord& r = records[i];
    const PyTraceFile& file = self.owner->File(r.file);
    const std::vector<py::str>& names = self.KeyNames(r.keys);
    py::dict columns;
    for (size_t c = 0; c < r.view.columns.size(); ++c) {
      const ColumnView& column = r.view.columns[c];
      columns[names[c]] = ColumnArray(file, column, self.raw);
      if (!column.known_dtype() &&
          self.unknown_dtypes.emplace(r.file, static_cast<int32_t>(column.dtype)).second) {
        unknown.append(py::make_tuple(r.file, static_cast<int32_t>(column.dtype)));
      }
    }
    py::object extra = py::none();
    if (!r.view.extra_fields.empty()) {
      py::list fields;
      for (const RawField& f : r.view.extra_fields) {
        fields.append(
            py::make_tuple(f.number, f.wire_type, py::bytes(f.payload.data(), f.payload.size())));
      }
      extra = std::move(fields);
    }
    out[i] = py::make_tuple(r.view.gstep, r.view.lstep, r.view.timestamp_ms, std::move(columns),
                            std::move(extra), r.file, r.view.offset);
  }
  return py::make_tuple(std::move(out), torn ? py::cast(*torn) : py::none(), done,
                        std::move(unknown));
}

// [(gsteps int64[n], values[n, *shape] or None, unknown dtype or None, shapes
// or None)] per key (values of a dtype newer than this reader: uint8[n, row
// bytes]; of a ragged key: its rows flattened one after another, with shapes
// int64[n, ndim]), and the torn tails met on the way. One copy, into the
// arrays, with the GIL released; unless `raw`, bfloat16 rows are widened to
// float32 as they are copied.
py::tuple Stack(PyTraceReader& self, std::optional<std::vector<std::string>> keys,
                const StepSelection& steps, std::optional<int32_t> rank, bool raw, bool ragged) {
  const StackResult result =
      ReadWithoutGil([&] { return self.reader.Stack(std::move(keys), steps, rank, ragged); });
  py::list out;
  std::vector<std::pair<const StackedKey*, char*>> copies;
  std::vector<std::pair<const StackedKey*, float*>> widenings;
  for (const StackedKey& key : result.keys) {
    py::array_t<int64_t> gsteps(static_cast<py::ssize_t>(key.gsteps.size()));
    if (!key.gsteps.empty()) {
      std::memcpy(gsteps.mutable_data(), key.gsteps.data(), key.gsteps.size() * sizeof(int64_t));
    }
    if (key.rows.empty()) {
      out.append(py::make_tuple(std::move(gsteps), py::none(), py::none(), py::none()));
      continue;
    }
    std::vector<py::ssize_t> shape{static_cast<py::ssize_t>(key.rows.size())};
    shape.insert(shape.end(), key.shape.begin(), key.shape.end());
    const bool known = IsValidDType(static_cast<int32_t>(key.dtype));
    py::object shapes = py::none();
    if (key.ragged()) {
      const size_t ndim = key.shape.size();
      py::array_t<int64_t> each({key.row_shapes.size(), ndim});
      for (size_t r = 0; r < key.row_shapes.size(); ++r) {
        std::copy(key.row_shapes[r].begin(), key.row_shapes[r].end(), each.mutable_data(r, 0));
      }
      shape = {static_cast<py::ssize_t>(key.bytes() / (known ? DTypeSize(key.dtype) : 1))};
      shapes = std::move(each);
    }
    const bool widen = !raw && key.dtype == DType::kBFloat16;
    py::array values(widen ? py::dtype("float32") : NumpyDType(key.dtype), shape);
    if (widen) {
      widenings.emplace_back(&key, static_cast<float*>(values.mutable_data()));
    } else {
      copies.emplace_back(&key, static_cast<char*>(values.mutable_data()));
    }
    out.append(py::make_tuple(
        std::move(gsteps), std::move(values),
        known ? py::object(py::none()) : py::object(py::int_(static_cast<int32_t>(key.dtype))),
        std::move(shapes)));
  }
  {
    py::gil_scoped_release release;
    for (const auto& [key, destination] : copies) key->CopyRowsTo(destination);
    for (const auto& [key, destination] : widenings) {
      float* out = destination;
      for (const absl::string_view row : key->rows) {
        WidenBFloat16(row.data(), row.size() / 2, out);
        out += row.size() / 2;
      }
    }
  }
  return py::make_tuple(std::move(out), result.torn_tails);
}

}  // namespace

void RegisterReaderBindings(py::module_& m) {
  py::class_<TornTail>(m, "TornTail", "A data file that ends inside a frame (xdl_trace::TornTail).")
      .def_readonly("path", &TornTail::path)
      .def_readonly("rank", &TornTail::rank)
      .def_readonly("offset", &TornTail::offset)
      .def_readonly("zero_filled", &TornTail::zero_filled)
      .def_readonly("zero_from", &TornTail::zero_from)
      .def("__str__", &DescribeTornTail);

  py::class_<PyTraceFile>(m, "TraceFile", "One mmap'd trace data file (xdl_trace::TraceFile).")
      .def_static(
          "open",
          [](const std::string& path, bool check_record_crc) {
            FileOptions options;
            options.check_record_crc = check_record_crc;
            std::shared_ptr<TraceFile> file =
                CallWithoutGil([&] { return TraceFile::Open(path, options); });
            return PyTraceFile{file, MappingArray(file)};
          },
          py::arg("path"), py::arg("check_record_crc") = true)
      .def_property_readonly("path", [](const PyTraceFile& f) { return f.file->path(); })
      .def_property_readonly("keys", [](const PyTraceFile& f) { return f.file->keys(); })
      .def_property_readonly("columns", [](const PyTraceFile& f) { return ColumnsOf(*f.file); })
      .def_property_readonly("size", [](const PyTraceFile& f) { return f.file->size(); })
      .def_property_readonly("first_record_offset",
                             [](const PyTraceFile& f) { return f.file->first_record_offset(); })
      .def_property_readonly("header_torn",
                             [](const PyTraceFile& f) { return f.file->header_torn(); })
      .def_property_readonly("meta",
                             [](const PyTraceFile& f) -> py::object {
                               if (!f.file->meta()) return py::none();
                               return MetaToDict(*f.file->meta());
                             })
      .def_property_readonly("meta_error",
                             [](const PyTraceFile& f) -> py::object {
                               if (f.file->meta_error().ok()) return py::none();
                               return py::str(std::string(f.file->meta_error().message()));
                             })
      .def_property_readonly("mapping", [](const PyTraceFile& f) { return f.mapping; })
      .def("count_frames",
           [](const PyTraceFile& f) {
             TraceFile::FrameCount count;
             {
               py::gil_scoped_release release;
               count = f.file->CountFrames();
             }
             py::dict d;
             d["records"] = count.records;
             d["torn_tail"] = count.torn_tail;
             d["corruption"] = count.corruption;
             return d;
           })
      .def("verify", [](const PyTraceFile& f) {
        VerifyReport report;
        {
          py::gil_scoped_release release;
          report = f.file->Verify();
        }
        return VerifyToDict(report);
      });

  py::class_<PyTraceCursor>(m, "TraceCursor",
                            "Records merged across ranks (xdl_trace::TraceCursor).")
      .def("next_batch", &NextBatch, py::arg("max_records"))
      .def("check_not_cut",
           [](PyTraceCursor& self) {
             const absl::Status status = self.cursor.CheckNotCut();
             if (!status.ok()) ThrowReadError(status);
           })
      .def_property_readonly("bytes_read",
                             [](const PyTraceCursor& c) { return c.cursor.bytes_read(); });

  py::class_<PyTraceReader, std::shared_ptr<PyTraceReader>>(
      m, "TraceReader", "A trace's data files grouped by rank (xdl_trace::TraceReader).")
      .def_static(
          "open",
          [](const std::string& path, const std::string& prefix, const std::string& name,
             bool check_record_crc) {
            FileOptions options;
            options.check_record_crc = check_record_crc;
            TraceReader reader =
                CallWithoutGil([&] { return TraceReader::Open(path, prefix, name, options); });
            auto self = std::make_shared<PyTraceReader>(PyTraceReader{reader, {}});
            self->files.resize(reader.files().size());
            return self;
          },
          py::arg("path"), py::arg("prefix") = "train", py::arg("name") = "trace",
          py::arg("check_record_crc") = true)
      .def_property_readonly("files",
                             [](const PyTraceReader& self) {
                               py::list out;
                               for (const TraceFileInfo& f : self.reader.files()) {
                                 out.append(py::make_tuple(f.path, f.prefix, f.name, f.rank,
                                                           f.index, f.superseded_from));
                               }
                               return out;
                             })
      .def_property_readonly("ranks", [](const PyTraceReader& self) { return self.reader.ranks(); })
      .def_property_readonly("keys",
                             [](const PyTraceReader& self) {
                               return ReadWithoutGil([&] { return self.reader.Keys(); });
                             })
      .def(
          "file", [](PyTraceReader& self, size_t index) { return self.File(index); },
          py::arg("index"))
      .def("schema",
           [](const PyTraceReader& self) {
             const auto schema = ReadWithoutGil([&] { return self.reader.Schema(); });
             py::list out;
             for (const KeySchema& k : schema) {
               out.append(py::make_tuple(
                   k.key, DTypeLabel(k.dtype), ShapeTuple(k.shape),
                   k.column ? py::object(ColumnInfoToDict(*k.column)) : py::object(py::none())));
             }
             return out;
           })
      .def(
          "read",
          [](const std::shared_ptr<PyTraceReader>& self,
             std::optional<std::vector<std::string>> keys, std::optional<int64_t> begin,
             std::optional<int64_t> end, std::optional<std::vector<int64_t>> steps,
             std::optional<std::vector<int32_t>> ranks, bool raw) {
            ReadOptions options;
            options.keys = std::move(keys);
            options.steps = Steps(begin, end, std::move(steps));
            options.ranks = std::move(ranks);
            return PyTraceCursor{self, self->reader.Read(std::move(options)), {}, {}, raw};
          },
          py::arg("keys") = py::none(), py::arg("begin") = py::none(), py::arg("end") = py::none(),
          py::arg("steps") = py::none(), py::arg("ranks") = py::none(), py::arg("raw") = false)
      .def(
          "stack",
          [](PyTraceReader& self, std::optional<std::vector<std::string>> keys,
             std::optional<int64_t> begin, std::optional<int64_t> end,
             std::optional<std::vector<int64_t>> steps, std::optional<int32_t> rank, bool raw,
             bool ragged) {
            return Stack(self, std::move(keys), Steps(begin, end, std::move(steps)), rank, raw,
                         ragged);
          },
          py::arg("keys") = py::none(), py::arg("begin") = py::none(), py::arg("end") = py::none(),
          py::arg("steps") = py::none(), py::arg("rank") = py::none(), py::arg("raw") = false,
          py::arg("ragged") = false)
      .def("runs",
           [](const PyTraceReader& self) {
             const auto runs = ReadWithoutGil([&] { return self.reader.Runs(); });
             py::list out;
             for (const RunSummary& run : runs) out.append(RunToDict(run));
             return out;
           })
      .def(
          "of_runs",
          [](const PyTraceReader& self, const std::vector<std::string>& run_ids) {
            TraceReader reader = ReadWithoutGil([&] { return self.reader.OfRuns(run_ids); });
            auto subset = std::make_shared<PyTraceReader>(PyTraceReader{reader, {}});
            subset->files.resize(reader.files().size());
            return subset;
          },
          py::arg("run_ids"))
      .def("latest_attempts",
           [](const PyTraceReader& self) {
             TraceReader reader = ReadWithoutGil([&] { return self.reader.LatestAttempts(); });
             auto latest = std::make_shared<PyTraceReader>(PyTraceReader{reader, {}});
             latest->files.resize(reader.files().size());
             return latest;
           })
      .def(
          "without",
          [](const PyTraceReader& self, const std::vector<std::string>& paths) {
            TraceReader reader = self.reader.Without(paths);  // No IO: the Subset of a list.
            auto subset = std::make_shared<PyTraceReader>(PyTraceReader{reader, {}});
            subset->files.resize(reader.files().size());
            return subset;
          },
          py::arg("paths"));

  m.def(
      "read_meta",
      [](const std::string& meta_path) {
        return MetaToDict(CallWithoutGil([&] { return ReadFileMeta(meta_path); }));
      },
      py::arg("meta_path"));
}

}  // namespace python
}  // namespace xdl_trace
