// kt_gguf_writer_expected_tensors: an architecture's tensor table, for programs that write models.
#include <cstring>
#include <vector>

#include "api/api_internal.h"
#include "mem/mapped_file.h"

using kt::Status;
using Role = kt::model::TensorSpec::Role;

static_assert(static_cast<int32_t>(Role::kEmbedding) == KT_TENSOR_ROLE_EMBEDDING &&
              static_cast<int32_t>(Role::kVector) == KT_TENSOR_ROLE_VECTOR &&
              static_cast<int32_t>(Role::kMatrix) == KT_TENSOR_ROLE_MATRIX &&
              static_cast<int32_t>(Role::kExperts) == KT_TENSOR_ROLE_EXPERTS,
              "kt.h's tensor roles are model::TensorSpec::Role's values");

extern "C" {

KT_API kt_status kt_gguf_writer_expected_tensors(const kt_gguf_writer *writer, kt_tensor_spec_callback callback,
                                                 void *user_data) {
    return kt::api::guard_on(writer, [&]() -> Status {
        KT_RETURN_IF(!writer, KT_STATUS_INVALID_ARGUMENT, "writer is NULL");
        KT_RETURN_IF(!callback, KT_STATUS_INVALID_ARGUMENT, "kt_gguf_writer_expected_tensors: callback is NULL");
        // Read the metadata back as a file (without tensors) and walk the architecture's table for it.
        std::vector<uint8_t> bytes;
        KT_TRY(writer->writer.metadata_only().write_buffer(&bytes));
        std::unique_ptr<kt::gguf::File> file;
        KT_TRY(kt::gguf::File::parse(kt::mem::MappedFile::borrow(bytes.data(), bytes.size()), "writer metadata", &file));
        std::vector<kt::model::TensorSpec> specs;
        KT_TRY(kt::model::list_tensors(*file, &specs));
        for (const kt::model::TensorSpec &s : specs) {
            kt_tensor_spec spec = kt::api::zeroed_struct<kt_tensor_spec>();
            spec.role = static_cast<int32_t>(s.role);
            spec.optional = s.optional ? 1 : 0;
            spec.n_dims = static_cast<int32_t>(s.ne.size());
            for (int d = 0; d < KT_MAX_DIMS; ++d) spec.ne[d] = d < spec.n_dims ? s.ne[static_cast<size_t>(d)] : 1;
            spec.name = s.name.c_str();
            KT_RETURN_IF(callback(&spec, user_data) != 0, KT_STATUS_CANCELLED,
                         "kt_gguf_writer_expected_tensors: the callback stopped at '%s'", s.name.c_str());
        }
        return Status::ok();
    });
}

}  // extern "C"
