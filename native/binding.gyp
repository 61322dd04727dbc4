{
  "targets": [
    {
      "target_name": "relay_dataplane",
      "sources": ["relay_dataplane.c", "dtls_record.c"],
      "cflags": ["-std=gnu11", "-O2", "-Wall", "-Wextra", "-Wno-unused-parameter", "-fno-strict-aliasing"],
      "libraries": ["-ldl", "-lpthread"],
      "conditions": [["OS!='linux'", {"type": "none"}]]
    }
  ]
}
