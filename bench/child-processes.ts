import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';

/** What one child printed last: `{"event":"done",...}`. */
export type DoneLine = Record<string, unknown>;

/** A child to start: `node --import tsx <script> ...args`. */
export type ChildScript = readonly [script: string, args: readonly string[]];

/**
 * Starts one `node --import tsx <script> ...args` per entry of `argsList`, waits until every one printed
 * `{"event":"ready"}`, starts them together (a line on stdin) and waits until all exited.
 * @returns the wall time from the start signal to the last exit, and each child's `done` line, in the order of `argsList`.
 */
export function runTogether(script: string, argsList: readonly string[][]): Promise<{ seconds: number; done: DoneLine[] }> {
  return runChildrenTogether(argsList.map((args) => [script, args]));
}

/** `runTogether` for children of different scripts. */
export async function runChildrenTogether(children: readonly ChildScript[]): Promise<{ seconds: number; done: DoneLine[] }> {
  let ready = 0;
  let go!: () => void;
  const allReady = new Promise<void>((resolve) => {
    go = resolve;
  });
  const done: DoneLine[] = [];
  const running = children.map(([script, args], index) => {
    const child = spawn(process.execPath, ['--import', 'tsx', script, ...args], {
      cwd: new URL('..', import.meta.url).pathname,
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let stderr = '';
    child.stderr.on('data', (chunk) => {
      stderr += chunk;
    });
    createInterface({ input: child.stdout }).on('line', (line) => {
      if (!line.startsWith('{')) return;
      const parsed = JSON.parse(line) as DoneLine;
      if (parsed.event === 'ready' && ++ready === children.length) go();
      if (parsed.event === 'done') done[index] = parsed;
    });
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    return { script, child, exited, stderr: () => stderr };
  });
  const failed = Promise.race(running.map((c) => c.exited.then((code) => (code !== 0 ? c : new Promise<never>(() => {})))));
  const first = await Promise.race([allReady.then(() => undefined), failed]);
  if (first) throw new Error(`${first.script} failed before it was ready: ${first.stderr()}`);
  const started = process.hrtime.bigint();
  for (const { child } of running) child.stdin.write('go\n');
  const codes = await Promise.all(running.map((c) => c.exited));
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  const bad = running.find((_, i) => codes[i] !== 0);
  if (bad) throw new Error(`${bad.script} failed: ${bad.stderr()}`);
  return { seconds, done: done.filter((line) => line !== undefined) };
}
