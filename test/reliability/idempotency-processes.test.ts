// Idempotent handling across processes: two processes delivering the same 400 message ids at once apply each once.
import { spawn } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { SagaRuntime } from '../../src/index.js';
import { ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { childCommand, useChildScripts } from '../support/child-scripts.js';
import { DIALECTS } from '../support/databases.js';
import { reportFigures } from '../support/reliability-figures.js';
import { REPO_ROOT } from '../support/repository.js';
import { rowsOf } from '../support/rows.js';
import { deferred, useDatabase } from '../support/suite.js';

const MESSAGES = 400;
const SAGAS = 20;

useChildScripts();

for (const dialect of DIALECTS) {
  describe(`idempotent handling in two processes (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);

    it('two processes delivering the same 400 message ids concurrently apply each exactly once', {
      tags: ['reliability'],
      timeout: 180_000,
    }, async ({ task }) => {
      const prefix = `procs-${dialect}`;
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga] });
      for (let s = 0; s < SAGAS; s++) await runtime.handle(scriptedSaga, { type: 'Start', key: `${prefix}-${s}` });
      const location = String(db().config.clientUrl ?? db().config.dbName);
      const args = childCommand('handler-process', [dialect, location, prefix, String(MESSAGES), String(SAGAS)]);
      const handlers = [0, 1].map(() => startHandler(args));
      // Both connected: they start at once, so the same ids race from the first message on.
      await Promise.all(handlers.map((h) => h.ready));
      for (const handler of handlers) handler.go();
      const outputs = await Promise.all(handlers.map((h) => h.output));
      const counts = outputs.map((stdout) => JSON.parse(stdout.trim().split('\n').pop()!).counts as Record<string, number>);

      const sagas = (await rowsOf(db().orm).sagas()).filter((s) => s.key.startsWith(`${prefix}-`));
      // Each saga is owed MESSAGES / SAGAS increments: fewer were lost, more were applied twice.
      const owed = MESSAGES / SAGAS;
      const lost = SAGAS * owed - sagas.reduce((sum, s) => sum + Math.min(s.counter, owed), 0);
      const twice = sagas.reduce((sum, s) => sum + Math.max(0, s.counter - owed), 0);
      // Hostile input: every id is delivered by both processes, so one of each pair is a redelivery.
      reportFigures(task, {
        scenario: 'same-message-ids',
        database: dialect,
        processes: 2,
        load: MESSAGES,
        kills: 0,
        restarts: 0,
        dbFaults: 0,
        hostile: MESSAGES,
        lost,
        twice,
      });
      expect({ lost, twice }).toEqual({ lost: 0, twice: 0 });
      expect(sagas.reduce((sum, s) => sum + s.counter, 0)).toBe(MESSAGES);
      for (const saga of sagas) expect(saga.version).toBe(saga.counter);
      expect(counts.reduce((sum, c) => sum + (c.handled ?? 0), 0)).toBe(MESSAGES);
      expect(counts.reduce((sum, c) => sum + (c.duplicate ?? 0), 0)).toBe(MESSAGES);
      expect(await rowsOf(db().orm).handledMessages()).toHaveLength(MESSAGES + 0);
    });
  });
}

/**
 * Starts a handler process: `ready` resolves once it is connected (rejects if it exits first), `go()` lets it
 * start, `output` is what it printed once it exited with 0.
 */
function startHandler(args: string[]) {
  const child = spawn(process.execPath, args, { cwd: REPO_ROOT, stdio: ['pipe', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  const readyLine = deferred();
  child.stdout.on('data', (chunk) => {
    stdout += chunk;
    if (stdout.includes('"event":"ready"')) readyLine.resolve();
  });
  child.stderr.on('data', (chunk) => {
    stderr += chunk;
  });
  const output = new Promise<string>((resolve, reject) =>
    child.on('exit', (code) => (code === 0 ? resolve(stdout) : reject(new Error(`the handler process exited with ${code}: ${stderr}`)))),
  );
  const ready = Promise.race([
    readyLine.promise,
    output.then(() => Promise.reject(new Error('the handler process exited before it was ready'))),
  ]);
  return { ready, go: () => child.stdin.write('go\n'), output };
}
