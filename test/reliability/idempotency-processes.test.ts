// Idempotent handling across processes: two processes delivering the same 1,000 message ids at once apply each once.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { SagaRuntime } from '../../src/index.js';
import { ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { DIALECTS } from '../support/databases.js';
import { reportFigures } from '../support/reliability-figures.js';
import { REPO_ROOT } from '../support/repository.js';
import { rowsOf } from '../support/rows.js';
import { useDatabase } from '../support/suite.js';

const run = promisify(execFile);
const MESSAGES = 1_000;
const SAGAS = 20;

for (const dialect of DIALECTS) {
  describe(`idempotent handling in two processes (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);

    it('two processes delivering the same 1,000 message ids concurrently apply each exactly once', {
      tags: ['reliability'],
      timeout: 180_000,
    }, async ({ task }) => {
      const prefix = `procs-${dialect}`;
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga] });
      for (let s = 0; s < SAGAS; s++) await runtime.handle(scriptedSaga, { type: 'Start', key: `${prefix}-${s}` });
      const location = String(db().config.clientUrl ?? db().config.dbName);
      const args = ['--import', 'tsx', 'test/support/handler-process.ts', dialect, location, prefix, String(MESSAGES), String(SAGAS)];
      const cwd = REPO_ROOT;
      const outputs = await Promise.all([0, 1].map(() => run(process.execPath, args, { cwd })));
      const counts = outputs.map(({ stdout }) => JSON.parse(stdout.trim().split('\n').pop()!).counts as Record<string, number>);

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
