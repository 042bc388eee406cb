#include "common/block_checksum.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

namespace kvfold {

namespace {

std::string DeterministicBytes(const google::protobuf::MessageLite& message) {
  std::string out;
  {
    google::protobuf::io::StringOutputStream raw(&out);
    google::protobuf::io::CodedOutputStream coded(&raw);
    coded.SetSerializationDeterministic(true);
    message.SerializeToCodedStream(&coded);
  }
  return out;
}

}  // namespace

std::string CanonicalHeaderBytes(const v1::MemoryBlockHeader& header) {
  v1::MemoryBlockHeader copy = header;
  copy.set_checksum(0);
  copy.clear_turn();
  copy.DiscardUnknownFields();
  return DeterministicBytes(copy);
}

uint64_t TurnRecordChecksum(const v1::TurnRecord& turn) {
  v1::TurnRecord copy = turn;
  copy.set_checksum(0);
  copy.DiscardUnknownFields();
  Xxh3Hasher hasher;
  hasher.Update(DeterministicBytes(copy));
  return hasher.Digest();
}

bool TurnRecordIntact(const v1::MemoryBlockHeader& header) {
  return !header.has_turn() || TurnRecordChecksum(header.turn()) == header.turn().checksum();
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
