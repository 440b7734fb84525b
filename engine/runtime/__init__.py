"""The runtime: the engine that batches every stream on one device (`engine.Engine`), the engine
process that serves it to the server's workers, the torch talker backend (`scheduler`), the frame
step, the decoder stage, text segmentation and the per-stream handles."""
