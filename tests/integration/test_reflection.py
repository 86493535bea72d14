"""Integration: gRPC server reflection of a real qdpd (v1 and v1alpha) — the services listed, the
file descriptors it hands out parsed by protobuf's own DescriptorPool and compared with what
protoc made of the same files, symbols of every kind found, unknown ones refused in the stream,
several requests on one stream.

Run by with_qdpd.sh (QDP_TARGET set) with QDP_DESC (qdp.proto's descriptor set) and
QDP_REFLECTION_DESC (the set of qdp.proto, health.proto and reflection.proto) in the environment.
"""

import os
import sys
import unittest

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

V1 = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"
V1ALPHA = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"


def classes(desc_path, *names):
    with open(desc_path, "rb") as f:
        fds = descriptor_pb2.FileDescriptorSet.FromString(f.read())
    pool = descriptor_pool.DescriptorPool()
    for fd in fds.file:
        pool.Add(fd)
    get = getattr(message_factory, "GetMessageClass", None) or \
        message_factory.MessageFactory(pool).GetPrototype
    return fds, [get(pool.FindMessageTypeByName(n)) for n in names]


class Reflection(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.set, (cls.Req, cls.Resp) = classes(
            os.environ["QDP_REFLECTION_DESC"], "grpc.reflection.v1.ServerReflectionRequest",
            "grpc.reflection.v1.ServerReflectionResponse")
        with open(os.environ["QDP_DESC"], "rb") as f:
            cls.qdp_file = descriptor_pb2.FileDescriptorSet.FromString(f.read()).file[0]
        cls.channel = grpc.insecure_channel(os.environ["QDP_TARGET"])

    def ask(self, *reqs, path=V1):
        call = self.channel.stream_stream(path, request_serializer=self.Req.SerializeToString,
                                          response_deserializer=self.Resp.FromString)
        return list(call(iter(reqs), timeout=30))

    def file_of(self, resp):
        self.assertEqual(resp.WhichOneof("message_response"), "file_descriptor_response",
                         resp.error_response.error_message)
        files = [descriptor_pb2.FileDescriptorProto.FromString(b)
                 for b in resp.file_descriptor_response.file_descriptor_proto]
        self.assertEqual(len(files), 1)  # none of the files imports another
        return files[0]

    def test_the_services_it_serves_are_listed(self):
        for path in (V1, V1ALPHA):
            (r,) = self.ask(self.Req(list_services=""), path=path)
            self.assertEqual(sorted(s.name for s in r.list_services_response.service),
                             ["grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection",
                              "qdp.Qdp"])
            self.assertEqual(r.original_request.list_services, "")

    def test_symbols_of_every_kind_give_their_file_as_protoc_made_it(self):
        asks = ["qdp.Qdp", "qdp.EncodeRequest", "qdp.Qdp.Encode", "qdp.DType",
                "grpc.health.v1.Health", "grpc.health.v1.HealthCheckResponse.ServingStatus",
                "grpc.reflection.v1.ServerReflection"]
        got = self.ask(*[self.Req(file_containing_symbol=s) for s in asks])
        self.assertEqual(len(got), len(asks))  # one answer per request, in order, one stream
        names = [self.file_of(r).name for r in got]
        self.assertEqual(names, ["qdp.proto"] * 4 + ["health.proto"] * 2 + ["reflection.proto"])
        self.assertEqual(self.file_of(got[0]), self.qdp_file)  # byte for byte what protoc made
        pool = descriptor_pool.DescriptorPool()
        pool.Add(self.file_of(got[0]))
        qdp = pool.FindServiceByName("qdp.Qdp")
        enc = qdp.FindMethodByName("Encode")
        self.assertEqual((enc.input_type.full_name, enc.output_type.full_name),
                         ("qdp.EncodeRequest", "qdp.EncodeReply"))
        health = self.file_of(got[4])
        pool.Add(health)
        self.assertEqual(pool.FindServiceByName("grpc.health.v1.Health").full_name,
                         "grpc.health.v1.Health")
        watch = next(m for m in health.service[0].method if m.name == "Watch")
        self.assertEqual((watch.client_streaming, watch.server_streaming), (False, True))

    def test_files_by_name_and_refusals_stay_in_the_stream(self):
        got = self.ask(self.Req(file_by_filename="health.proto"),
                       self.Req(file_by_filename="nope.proto"),
                       self.Req(file_containing_symbol="qdp.Nope"),
                       self.Req(file_containing_symbol="qdp"),
                       self.Req(all_extension_numbers_of_type="qdp.EncodeRequest"),
                       self.Req(file_by_filename="qdp.proto"), path=V1ALPHA)
        self.assertEqual(self.file_of(got[0]).package, "grpc.health.v1")
        for r, what in zip(got[1:5], ("nope.proto", "qdp.Nope", "'qdp'", "extensions")):
            self.assertEqual(r.WhichOneof("message_response"), "error_response")
            self.assertEqual(r.error_response.error_code, grpc.StatusCode.NOT_FOUND.value[0])
            self.assertIn(what, r.error_response.error_message)
        self.assertEqual(self.file_of(got[5]), self.qdp_file)

    def test_a_stream_closed_at_once_ends_ok(self):
        self.assertEqual(self.ask(), [])


if __name__ == "__main__":
    r = unittest.main(verbosity=2, exit=False)
    sys.exit(0 if r.result.wasSuccessful() else 1)
