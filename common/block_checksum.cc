#include "common/block_checksum.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

namespace kvfold {

std::string CanonicalHeaderBytes(const v1::MemoryBlockHeader& header) {
  v1::MemoryBlockHeader copy = header;
  copy.set_checksum(0);
  copy.DiscardUnknownFields();
  std::string out;
  {
    google::protobuf::io::StringOutputStream raw(&out);
    google::protobuf::io::CodedOutputStream coded(&raw);
    coded.SetSerializationDeterministic(true);
    copy.SerializeToCodedStream(&coded);
  }
  return out;
}

BlockChecksummer::BlockChecksummer(const v1::MemoryBlockHeader& header) {
  hasher_.Update(CanonicalHeaderBytes(header));
}

uint64_t BlockChecksum(const v1::MemoryBlockHeader& header, std::string_view payload) {
  BlockChecksummer c(header);
  c.Update(payload);
  return c.Digest();
}

}  // namespace kvfold
