"""What the device is and how work reaches it (layer 2 of docs/architecture.md):

- device_info: what a Vulkan device reports, as one plain record;
- caps: what the dispatcher needs to know of it, and lavapipe's loop budget;
- memory: what an upload may take of its memory;
- shader_variants: the compiled shaders, one source and many defines;
- runtime: the device opened through Kompute;
- timing: how GPU work is timed.
"""
