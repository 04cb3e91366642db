import { spawn } from 'node:child_process';
import type { MikroORM } from '@mikro-orm/core';
import { childCommand } from './child-scripts.js';
import type { DialectName } from './databases.js';
import { drainContinuations } from './flush-hold.js';
import { REPO_ROOT } from './repository.js';

/** One JSON line a stager process printed. */
export type StagerLine = Record<string, unknown> & { readonly event?: string };

/**
 * Starts `test/support/stager-process.ts` with `args` on the test database: `next(event)` resolves with the first line
 * of that event not yet taken (rejects if the process exits first), `send(line)` writes a line to its stdin, `exited`
 * resolves with every line it printed once it exited with 0.
 */
export function startStager(dialect: DialectName, location: string, args: readonly string[]) {
  const child = spawn(process.execPath, childCommand('stager-process', [dialect, location, ...args]), {
    cwd: REPO_ROOT,
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  const lines: StagerLine[] = [];
  const waiting: { event: string; resolve: (line: StagerLine) => void }[] = [];
  let buffer = '';
  let stderr = '';
  child.stdout.on('data', (chunk) => {
    if (process.env.STAGER_DEBUG) process.stderr.write(chunk);
    buffer += chunk;
    let end = buffer.indexOf('\n');
    while (end >= 0) {
      const line = JSON.parse(buffer.slice(0, end)) as StagerLine;
      buffer = buffer.slice(end + 1);
      lines.push(line);
      const at = waiting.findIndex((w) => w.event === line.event);
      if (at >= 0) waiting.splice(at, 1)[0]!.resolve(line);
      end = buffer.indexOf('\n');
    }
  });
  child.stderr.on('data', (chunk) => {
    stderr += chunk;
    if (process.env.STAGER_DEBUG) process.stderr.write(chunk);
  });
  const exited = new Promise<StagerLine[]>((resolve, reject) =>
    child.on('exit', (code) => (code === 0 ? resolve(lines) : reject(new Error(`the stager process exited with ${code}: ${stderr}`)))),
  );
  const taken = new Set<StagerLine>();
  const next = (event: string) =>
    Promise.race([
      new Promise<StagerLine>((resolve) => {
        const line = lines.find((l) => l.event === event && !taken.has(l));
        if (line) resolve(line);
        else waiting.push({ event, resolve });
      }).then((line) => {
        taken.add(line);
        return line;
      }),
      exited.then(() => Promise.reject(new Error(`the stager process exited before printing '${event}'`))),
    ]);
  return { next, send: (line: string) => void child.stdin.write(`${line}\n`), exited };
}

/** Resolves once the PostgreSQL backend `pid` waits for an advisory lock (a saga key's); never sleeps. */
export async function untilWaitingForAdvisoryLock(orm: MikroORM, pid: number): Promise<void> {
  const sql = `select count(*)::int as n from pg_stat_activity where pid = ? and wait_event_type = 'Lock' and wait_event = 'advisory'`;
  for (;;) {
    const [row] = await orm.em.fork().getConnection().execute<{ n: number }[]>(sql, [pid]);
    if (row!.n > 0) return;
    await drainContinuations();
  }
}
