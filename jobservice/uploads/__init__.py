"""Direct uploads: a client declares a file, PUTs its bytes straight to the object store (presigned
S3 URLs, or the API itself with the local store), and completes it once; the file is checked by
content like a form upload, and jobs name it by its id instead of sending the file.

``views`` are the shapes a client reads (pydantic only, for ``jobservice.client``); ``service`` does
the work.
"""
