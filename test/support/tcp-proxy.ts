import { connect, createServer, type Server, type Socket } from 'node:net';

/** What the proxy does to the next COMMIT (or BEGIN) a client sends. */
export type CommitFault =
  /** Forward COMMIT, let the server apply it, then drop the client's connection instead of relaying the answer. */
  | 'drop-after-commit'
  /** As `drop-after-commit`, but reset the client's connection (TCP RST): the driver reports `ECONNRESET`. */
  | 'reset-after-commit'
  /** Drop both connections instead of forwarding COMMIT: the server rolls the transaction back. */
  | 'drop-before-commit'
  /** Drop both connections instead of forwarding the next BEGIN: the transaction never starts. */
  | 'drop-at-begin';

/**
 * A TCP proxy in front of PostgreSQL that can lose the connection exactly at COMMIT, so a test reproduces
 * "the connection dropped after COMMIT was sent" without timing luck. It reads the PostgreSQL wire protocol
 * only far enough to spot a simple-query message whose text is COMMIT.
 */
export class CommitDroppingProxy {
  private server: Server | undefined;
  private readonly sockets = new Set<Socket>();
  private fault: CommitFault | undefined;
  /** Resolves once the armed fault has happened. */
  faulted: Promise<void> = Promise.resolve();
  private markFaulted: () => void = () => undefined;

  constructor(
    private readonly targetHost: string,
    private readonly targetPort: number,
  ) {}

  /** Starts listening on a free local port; returns it. */
  async listen(): Promise<number> {
    this.server = createServer((client) => this.pipe(client));
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', resolve));
    return (this.server.address() as { port: number }).port;
  }

  /** Applies `fault` to the next COMMIT any client sends. */
  arm(fault: CommitFault): void {
    this.fault = fault;
    this.faulted = new Promise<void>((resolve) => {
      this.markFaulted = resolve;
    });
  }

  /** Stops listening and cuts every open connection. */
  async close(): Promise<void> {
    for (const socket of this.sockets) socket.destroy();
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
  }

  private pipe(client: Socket): void {
    const upstream = connect(this.targetPort, this.targetHost);
    for (const socket of [client, upstream]) {
      this.sockets.add(socket);
      socket.on('close', () => this.sockets.delete(socket));
    }
    let swallowAnswer = false;
    let resetClient = false;
    const dropBoth = () => {
      client.destroy();
      upstream.destroy();
    };
    client.on('data', (chunk: Buffer) => {
      const fault = this.fault;
      if (fault && isQueryOf(chunk, fault === 'drop-at-begin' ? 'begin' : 'commit')) {
        this.fault = undefined;
        if (fault !== 'drop-after-commit' && fault !== 'reset-after-commit') {
          dropBoth();
          this.markFaulted();
          return;
        }
        swallowAnswer = true;
        resetClient = fault === 'reset-after-commit';
      }
      upstream.write(chunk);
    });
    upstream.on('data', (chunk: Buffer) => {
      if (swallowAnswer) {
        // The server answered COMMIT: it is durable. The client never hears it.
        if (resetClient) client.resetAndDestroy();
        dropBoth();
        this.markFaulted();
        return;
      }
      client.write(chunk);
    });
    client.on('error', dropBoth);
    upstream.on('error', dropBoth);
    client.on('close', () => upstream.end());
    upstream.on('close', () => client.destroy());
  }
}

/**
 * A query message that starts a transaction (`begin`: its text starts with BEGIN) or ends one (`commit`: its last
 * statement is COMMIT, alone or after the statements it carries, as the library sends a unit of one statement on
 * MikroORM 6): a simple query ('Q', int32 length, text), as MikroORM 6 (knex) sends it, or an extended-protocol
 * Parse ('P', int32 length, statement name, text), as MikroORM 7 (kysely) does.
 */
function isQueryOf(chunk: Buffer, command: 'begin' | 'commit'): boolean {
  let start: number;
  if (chunk[0] === 0x51) start = 5;
  else if (chunk[0] === 0x50) start = chunk.indexOf(0, 5) + 1;
  else return false;
  if (start <= 0) return false;
  const end = chunk.indexOf(0, start);
  const text = chunk.toString('utf8', start, end < 0 ? chunk.length : end);
  return command === 'begin' ? /^\s*begin\b/i.test(text) : /(?:^|;)\s*commit\s*;?\s*$/i.test(text);
}
