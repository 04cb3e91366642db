// The unit of work reads its saga row with a SELECT of its own when the mapping allows, else with em.findOne
// (src/saga/unit-of-work/load-instance.ts). Both reads must give the step the same thing whatever the ORM config:
// with `disableIdentityMap` em.findOne returns an entity its EntityManager does not manage (the step's changes
// were never written), and with a global `resultCache` it returns the cached first answer (null: every later
// message was ignored). The own SELECT reads afresh into the unit of work; so must the em.findOne fallback.
import { defineEntity, type Options } from '@mikro-orm/core';
import { describe, expect, it } from 'vitest';
import { defineSaga, SagaRuntime, SagaState, SagaStateSchema } from '../../src/index.js';
import { DIALECTS } from '../support/databases.js';
import { uniqueKey, useDatabase } from '../support/suite.js';

class PlainConfigSaga extends SagaState {
  key!: string;
  count: number = 0;
}

const PlainConfigSagaSchema = defineEntity({
  class: PlainConfigSaga,
  extends: SagaStateSchema,
  tableName: 'plain_config_saga',
  properties: {
    key: { type: 'string', fieldName: 'key', unique: true },
    count: { type: 'integer', fieldName: 'count' },
  },
});

/** A formula: read by em.findOne, not by the library's own SELECT. */
class FormulaConfigSaga extends SagaState {
  key!: string;
  count: number = 0;
  doubled?: number;
}

const FormulaConfigSagaSchema = defineEntity({
  class: FormulaConfigSaga,
  extends: SagaStateSchema,
  tableName: 'formula_config_saga',
  properties: {
    key: { type: 'string', fieldName: 'key', unique: true },
    count: { type: 'integer', fieldName: 'count' },
    doubled: { type: 'integer', formula: (alias: string) => `${alias}.count * 2`, persist: false, nullable: true },
  },
});

type Message = { readonly type: 'Start'; readonly key: string } | { readonly type: 'Inc'; readonly key: string };

function counterSaga(name: string, state: typeof PlainConfigSaga | typeof FormulaConfigSaga) {
  return defineSaga<PlainConfigSaga, Message>({
    name,
    state,
    correlation: { property: 'key', from: { Start: (m) => m.key, Inc: (m) => m.key } },
    startedBy: ['Start'],
    steps: {
      Start() {},
      Inc(saga) {
        saga.count++;
      },
    },
  });
}

const SAGAS = [
  { saga: counterSaga('plain-config', PlainConfigSaga), state: PlainConfigSaga },
  { saga: counterSaga('formula-config', FormulaConfigSaga), state: FormulaConfigSaga },
];

const CONFIGS: Partial<Options>[] = [{ disableIdentityMap: true }, { resultCache: { global: 60_000 } }];

for (const dialect of DIALECTS) {
  describe(`the saga read under ORM-wide read settings (${dialect})`, () => {
    const db = useDatabase(dialect, [PlainConfigSagaSchema, FormulaConfigSagaSchema]);

    for (const overrides of CONFIGS) {
      it(`${JSON.stringify(overrides)}: every step sees the saga's row and its changes are written, whatever the mapping`, async () => {
        const orm = await db().openAnother(overrides);
        for (const { saga, state } of SAGAS) {
          const runtime = new SagaRuntime({ em: orm.em, sagas: [saga] });
          const key = uniqueKey(saga.name);
          expect(await runtime.handle(saga, { type: 'Start', key }), saga.name).toMatchObject({ outcome: 'started' });
          expect(await runtime.handle(saga, { type: 'Inc', key }), saga.name).toMatchObject({ outcome: 'handled', version: 1 });
          expect(await runtime.handle(saga, { type: 'Inc', key }), saga.name).toMatchObject({ outcome: 'handled', version: 2 });
          expect(await db().orm.em.fork().findOneOrFail(state, { key }), saga.name).toMatchObject({ count: 2, version: 2 });
        }
      });
    }
  });
}
