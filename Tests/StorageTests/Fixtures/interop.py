"""Interop peer for the storage tests: the official google-cloud-storage client against the emulator.

Usage (STORAGE_EMULATOR_HOST must point at the emulator):
  interop.py read BUCKET NAME OUTPUT_FILE   -> prints the object's metadata as JSON, writes its bytes
  interop.py write BUCKET NAME INPUT_FILE CONTENT_TYPE KEY=VALUE...  -> uploads, prints metadata as JSON
  interop.py describe BUCKET NAME           -> prints the object's metadata as JSON ({"error": ...} when missing)
  interop.py patch BUCKET NAME KEY=VALUE... -KEY...  -> sets and deletes custom metadata keys, prints metadata as JSON
"""
import json
import sys

from google.auth.credentials import AnonymousCredentials
from google.cloud import storage


def describe(blob):
    return {
        "name": blob.name,
        "size": blob.size,
        "md5Hash": blob.md5_hash,
        "crc32c": blob.crc32c,
        "contentType": blob.content_type,
        "cacheControl": blob.cache_control,
        "contentDisposition": blob.content_disposition,
        "contentLanguage": blob.content_language,
        "metadata": blob.metadata or {},
        "metageneration": str(blob.metageneration),
    }


def main(argv):
    client = storage.Client(project="interop", credentials=AnonymousCredentials())
    command, bucket_name, name = argv[1], argv[2], argv[3]
    bucket = client.bucket(bucket_name)
    if command == "read":
        blob = bucket.get_blob(name)
        if blob is None:
            print(json.dumps({"error": "not found"}))
            return 2
        # Described before downloading: the download refreshes some fields from the media response's
        # headers, which the emulator does not send.
        description = describe(blob)
        # checksum="md5" makes the client verify the bytes against the server's hash itself.
        blob.download_to_filename(argv[4], checksum="md5")
        print(json.dumps(description))
        return 0
    if command == "describe":
        blob = bucket.get_blob(name)
        print(json.dumps(describe(blob) if blob is not None else {"error": "not found"}))
        return 0
    if command == "write":
        blob = bucket.blob(name)
        blob.metadata = dict(pair.split("=", 1) for pair in argv[6:])
        blob.upload_from_filename(argv[4], content_type=argv[5])
        blob.reload()
        print(json.dumps(describe(blob)))
        return 0
    if command == "patch":
        blob = bucket.get_blob(name)
        # The whole map, the deleted keys as None: GCS merges it, the emulator replaces the map with it.
        metadata = dict(blob.metadata or {})
        for change in argv[4:]:
            if change.startswith("-"):
                metadata[change[1:]] = None
            else:
                key, value = change.split("=", 1)
                metadata[key] = value
        blob.metadata = metadata
        blob.patch()
        print(json.dumps(describe(blob)))
        return 0
    print("unknown command", command, file=sys.stderr)
    return 64


if __name__ == "__main__":
    sys.exit(main(sys.argv))
