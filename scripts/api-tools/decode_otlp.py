"""Decodes OTLP/HTTP trace exports as a collector does, with the
`opentelemetry-proto` package: each file argument is one request body,
gunzipped first when its name ends in `.gz`. Prints one JSON object per
span: its name, status code and attributes (values as text).

    python decode_otlp.py export-1.pb.gz export-2.pb ...
"""

import gzip
import json
import sys

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest


def text(value):
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return ",".join(text(v) for v in value.array_value.values)
    return str(getattr(value, kind)) if kind else ""


def main():
    for path in sys.argv[1:]:
        body = open(path, "rb").read()
        if path.endswith(".gz"):
            body = gzip.decompress(body)
        request = ExportTraceServiceRequest.FromString(body)
        for resource in request.resource_spans:
            for scope in resource.scope_spans:
                for span in scope.spans:
                    attributes = {a.key: text(a.value) for a in span.attributes}
                    print(json.dumps({"name": span.name, "status": span.status.code, "attributes": attributes}))


if __name__ == "__main__":
    main()
