// SQLite's default batchSize is 2 x concurrency (commit 53a2b4a). A concurrency the options accept must give a
// dispatcher whose passes run: either the derived batchSize is refused up front with OPTION_INVALID, or it claims.
import { defineEntity } from '@mikro-orm/core';
import { describe, expect, it } from 'vitest';
import { defineSaga, SagaDispatcher, SagaRuntime, SagaState, SagaStateSchema, silentLogger } from '../../../src/index.js';
import { FakeClock } from '../../../src/testing/index.js';
import { DIALECTS, isSqlite } from '../../support/databases.js';
import { useDatabase } from '../../support/suite.js';

class WideSaga extends SagaState {
  key!: string;
}

const WideSagaSchema = defineEntity({
  class: WideSaga,
  extends: SagaStateSchema,
  tableName: 'wide_concurrency_saga',
  properties: { key: { type: 'string', fieldName: 'key', unique: true } },
});

const wideSaga = defineSaga<WideSaga, { readonly type: 'Start'; readonly key: string }>({
  name: 'wide-concurrency',
  state: WideSaga,
  correlation: { property: 'key', from: { Start: (m) => m.key } },
  startedBy: ['Start'],
  steps: { Start() {} },
});

for (const dialect of DIALECTS.filter(isSqlite)) {
  describe(`a huge concurrency with the SQLite default batchSize (${dialect})`, () => {
    const db = useDatabase(dialect, [WideSagaSchema]);
    for (const concurrency of [2 ** 40, 2 ** 62, 1e300]) {
      it(`concurrency ${concurrency}: refused with OPTION_INVALID or a pass runs`, async () => {
        const clock = new FakeClock('2026-02-02T10:00:00.000Z');
        const runtime = new SagaRuntime({ em: db().orm.em, sagas: [wideSaga], clock });
        let dispatcher: SagaDispatcher;
        try {
          dispatcher = new SagaDispatcher({ runtime, clock, logger: silentLogger, concurrency, verifySchema: false });
        } catch (error) {
          expect(error).toMatchObject({ code: 'OPTION_INVALID' });
          return;
        }
        await expect(dispatcher.runOnce()).resolves.toMatchObject({ timers: { claimed: 0 } });
      });
    }
  });
}
