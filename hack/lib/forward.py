"""A loopback forward into a network namespace (docs/local-node.md "Addresses").

    forward.py LISTEN_PORT NETNS_PATH TARGET_PORT

Listens on 127.0.0.1:LISTEN_PORT in the namespace it is started in (the host's), and connects each client to
127.0.0.1:TARGET_PORT in the namespace NETNS_PATH (the lab's): a kubectl on the host reaches the lab's API server
while no address or route of the host changes. The listening socket is made before the switch, so it stays in the
host's namespace; every socket made after it is the lab's.
"""

import asyncio
import ctypes
import os
import socket
import sys

CLONE_NEWNET = 0x40000000


def enter(netns_path: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(netns_path, os.O_RDONLY)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        sys.exit(f"forward: cannot enter {netns_path}: {os.strerror(err)}")
    os.close(fd)


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(1 << 16):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        pass


async def main() -> None:
    listen_port, netns_path, target_port = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", listen_port))
    listener.listen(256)
    enter(netns_path)

    async def serve(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            target_reader, target_writer = await asyncio.open_connection("127.0.0.1", target_port)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(pipe(client_reader, target_writer), pipe(target_reader, client_writer))
        for writer in (client_writer, target_writer):
            writer.close()

    server = await asyncio.start_server(serve, sock=listener)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
