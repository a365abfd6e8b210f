"""The router: protocol engines without I/O, the wire and trace formats, and the
trio runtime that runs one engine over TCP inside a container or a local process."""
