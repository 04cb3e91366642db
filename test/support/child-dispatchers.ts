import { type ChildProcess, spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import type { MikroORM } from '@mikro-orm/core';
import { SagaRuntime } from '../../src/index.js';
import { FakeClock } from '../../src/testing/index.js';
import type { Action } from '../fixtures/scripted-saga.js';
import { ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { childCommand } from './child-scripts.js';
import type { DialectName, TestDatabase } from './databases.js';
import type { ChildOptions } from './dispatcher-process.js';
import { REPO_ROOT } from './repository.js';

/** One JSON line a child dispatcher printed. */
export interface ChildLine {
  readonly pid: number;
  readonly event: string;
  readonly [key: string]: unknown;
}

/** A running child dispatcher. */
export interface ChildDispatcher {
  readonly child: ChildProcess;
  /** Resolves with the exit code, or null when a signal ended the process (then `signal()` says which). */
  readonly exited: Promise<number | null>;
  /** With `waitForGo`: resolves once the process is connected and waits for `go()`; rejects if it exits first. */
  readonly ready: Promise<void>;
  /** Lets a process started with `waitForGo` start, or one that printed `paused` go on. */
  go(): void;
  signal(): NodeJS.Signals | null;
}

/** Where a child finds the test database. */
export function locationOf(db: TestDatabase): string {
  return db.dialect === 'postgresql' ? (db.config.clientUrl as string) : (db.config.dbName as string);
}

/**
 * Starts `test/support/dispatcher-process.ts` (built by `useChildScripts()`, which the test file calls) and streams
 * its JSON lines.
 */
export function startChild(
  mode: 'drain' | 'hang' | 'poison',
  dialect: DialectName,
  location: string,
  onLine: (line: ChildLine) => void,
  options: ChildOptions = {},
): ChildDispatcher {
  const child = spawn(process.execPath, childCommand('dispatcher-process', [mode, dialect, location, JSON.stringify(options)]), {
    cwd: REPO_ROOT,
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let stderr = '';
  let signal: NodeJS.Signals | null = null;
  let markReady!: () => void;
  const readyLine = new Promise<void>((resolve) => {
    markReady = resolve;
  });
  child.stderr?.on('data', (chunk) => {
    stderr += chunk;
  });
  createInterface({ input: child.stdout! }).on('line', (line) => {
    if (!line.startsWith('{')) return;
    const parsed = JSON.parse(line) as ChildLine;
    if (parsed.event === 'ready') markReady();
    onLine(parsed);
  });
  const exited = new Promise<number | null>((resolve) =>
    child.on('exit', (code, by) => {
      signal = by;
      if (code !== 0 && code !== null) console.error(stderr);
      resolve(code);
    }),
  );
  const ready = Promise.race([
    readyLine,
    exited.then((code) => {
      throw new Error(`the child dispatcher exited (${code ?? signal}) before it was ready`);
    }),
  ]);
  // A process started without `waitForGo` is never ready: only a test that awaits `ready` hears of it.
  ready.catch(() => undefined);
  return { child, exited, ready, go: () => child.stdin?.write('go\n'), signal: () => signal };
}

/** Ends a child that is still running (a standby never let go); resolves once it is gone. */
export async function stopChild(dispatcher: ChildDispatcher): Promise<void> {
  if (dispatcher.child.exitCode === null && dispatcher.child.signalCode === null) dispatcher.child.kill('SIGTERM');
  await dispatcher.exited;
}

/** A runtime whose clock stands an hour behind the system clock: what it schedules is due for a child process. */
export function seedingRuntime(orm: MikroORM): SagaRuntime {
  return new SagaRuntime({ em: orm.em, sagas: [scriptedSaga], clock: new FakeClock(new Date(Date.now() - 3_600_000)) });
}

/** Starts `sagas` sagas with `perSaga` timers each through `runtime`. */
export async function seedDueTimers(runtime: SagaRuntime, prefix: string, sagas: number, perSaga: number): Promise<string[]> {
  const keys = Array.from({ length: sagas }, (_, i) => `${prefix}-${i}`);
  const actions: Action[] = Array.from({ length: perSaga }, (_, t) => ({ op: 'schedule', name: `t${t}`, after: t }));
  for (let i = 0; i < keys.length; i += 25) {
    await Promise.all(keys.slice(i, i + 25).map((key) => runtime.handle(scriptedSaga, { type: 'Start', key, actions })));
  }
  return keys;
}

/**
 * The sagas whose log does not show each of their `perSaga` timers applied exactly once. Order is not
 * checked: one dispatcher delivers a saga's timers in due order, but two dispatchers, or a retry after a
 * failure, may apply them in another order.
 */
export function sagasNotAppliedOnce(sagas: ScriptedSaga[], perSaga: number): string[] {
  const expected = Array.from({ length: perSaga }, (_, t) => `tick:t${t}`).sort();
  return sagas
    .filter((saga) => {
      const [started, ...ticks] = saga.log.split(';').filter(Boolean);
      return started !== 'started' || JSON.stringify(ticks.sort()) !== JSON.stringify(expected) || saga.version !== perSaga;
    })
    .map((saga) => `${saga.key}: ${saga.log} (version ${saga.version})`);
}

export { ScriptedSaga };
