"""Images (class-folder trees and CSV/JSONL manifests) to batches of tf.train.Example.

`config` (ImageConfig, ImagePlan, output features, reason codes), `plan` (folder and
manifest planning on the launcher), `convert` (the Beam DoFn `ConvertImages`), `paths`
(the allowed-roots security model), `headers` (what a header check promises) and
`processing` (decode, orient, resize, re-encode: `RenderOptions`).
"""
