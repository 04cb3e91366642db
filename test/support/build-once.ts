// A folder that the processes of a test run build once and share (test/support/packed-package.ts).
import { link, mkdir, readFile, rename, rm, stat, unlink, writeFile } from 'node:fs/promises';
import { type AddressInfo, connect, createServer, type Socket } from 'node:net';
import { dirname } from 'node:path';

async function exists(path: string): Promise<boolean> {
  return stat(path).then(
    () => true,
    () => false,
  );
}

/**
 * `dir`, built by `build` once for every process that asks for it. The builder builds into a folder of its own
 * and renames it to `dir` when complete (a rename is atomic), so `dir` is never seen half-written, and a failed
 * build leaves no `dir`. While one process builds, it holds `dir`.lock and the others wait for it (`takeLock`).
 */
export async function buildOnce(dir: string, build: (into: string) => Promise<void>): Promise<string> {
  await mkdir(dirname(dir), { recursive: true });
  for (;;) {
    if (await exists(dir)) return dir;
    const lock = await takeLock(`${dir}.lock`);
    if (!lock) {
      await lockReleased(`${dir}.lock`);
      continue;
    }
    try {
      if (await exists(dir)) return dir;
      const partial = `${dir}.partial-${process.pid}`;
      await rm(partial, { recursive: true, force: true });
      await mkdir(partial);
      await build(partial);
      await rename(partial, dir).catch(async (error: NodeJS.ErrnoException) => {
        // A process that took over a lock it found abandoned finished first: its folder is as good as this one.
        if (!(await exists(dir))) throw error;
        await rm(partial, { recursive: true, force: true });
      });
      return dir;
    } finally {
      await lock.release();
    }
  }
}

/**
 * Takes the lock file `path`, or returns undefined when another process holds it. The holder listens on a
 * loopback port, written in the file (created whole by link(), so never read half-written): the others connect
 * there and learn that the holder let go when the connection closes, at once, whether the holder released the
 * lock or died. No process waits on a timer.
 */
async function takeLock(path: string): Promise<{ release: () => Promise<void> } | undefined> {
  const sockets = new Set<Socket>();
  const server = createServer((socket) => {
    sockets.add(socket);
    socket.on('error', () => undefined);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const close = async () => {
    for (const socket of sockets) socket.destroy();
    await new Promise((resolve) => server.close(resolve));
  };
  const claim = `${path}.${process.pid}`;
  await writeFile(claim, String((server.address() as AddressInfo).port));
  const taken = await link(claim, path).then(
    () => true,
    (error: NodeJS.ErrnoException) => {
      if (error.code !== 'EEXIST') throw error;
      return false;
    },
  );
  await unlink(claim);
  if (!taken) {
    await close();
    return undefined;
  }
  return {
    release: async () => {
      await unlink(path).catch(() => undefined);
      await close();
    },
  };
}

/** Resolves when the holder of the lock file `path` lets go of it; removes the lock of a holder that died. */
async function lockReleased(path: string): Promise<void> {
  const port = Number(await readFile(path, 'utf8').catch(() => ''));
  if (!port) return; // released already
  const refused = await new Promise<boolean>((resolve) => {
    let connected = false;
    const socket = connect(port, '127.0.0.1');
    socket.on('connect', () => {
      connected = true;
    });
    socket.on('error', () => undefined);
    socket.on('close', () => resolve(!connected));
  });
  // Nothing listens on the lock's port: its holder is gone (it released the lock just now, or it died). Remove
  // that lock, unless another process holds a new one already.
  if (refused && Number(await readFile(path, 'utf8').catch(() => '')) === port) await unlink(path).catch(() => undefined);
}
