"""Images (class-folder trees and CSV/JSONL manifests) to batches of tf.train.Example.

`paths` (the allowed-roots security model), `headers` (what a header check promises),
`processing` (decode, orient, resize, re-encode) and `convert` (planning, the Beam DoFn
`ConvertImages` and its `ImageConfig`).
"""
