"""The GGUF block formats, without a GPU (layer 1 of docs/architecture.md):

- formats: the block format table, the one definition of every layout;
- activations: the int8 path's activation formats (q8_1, q8_1x2);
- lookup_tables, repack, layout: the blocks as the device holds them;
- reference: numpy references (dequantizer, the int8 path's arithmetic, NMSE);
- synthetic: random valid blocks;
- gguf_io: GGUF files; vocab, tokenizer, spm: the tokenizer stored in one
  (byte-level BPE, SentencePiece).
"""
