"""Protocol-buffer message classes from a FileDescriptorSet (protoc's
--descriptor_set_out), for the Python gRPC peers of the tests: the kubelet stand-ins and
the interop peer build their messages from the same .proto files vgpu's C is generated
from, with no generated Python code.

    import vg_proto
    M = {}
    vg_proto.load_messages("build/gen/dra/proto/dra.desc", M)
    req = M["NodePrepareResourcesRequest"](claims=[...])
"""
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory


def load_messages(path, into):
    """Fills into {message name: class} with every top-level message of the set at path."""
    fds = descriptor_pb2.FileDescriptorSet()
    with open(path, "rb") as f:
        fds.ParseFromString(f.read())
    pool = descriptor_pool.DescriptorPool()
    for fd in fds.file:
        pool.Add(fd)
    factory = message_factory.MessageFactory(pool)
    for fd in fds.file:
        for d in fd.message_type:
            desc = pool.FindMessageTypeByName("%s.%s" % (fd.package, d.name))
            if hasattr(message_factory, "GetMessageClass"):
                into[d.name] = message_factory.GetMessageClass(desc)
            else:
                into[d.name] = factory.GetPrototype(desc)
