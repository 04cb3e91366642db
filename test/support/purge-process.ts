/**
 * Purges in a process of its own, for the retention tests across processes.
 *
 *   node --import tsx test/support/purge-process.ts <dialect> <location> <cutoff ISO> <batch size>
 *
 * Deletes dispatched rows and completed sagas before the cutoff; prints its PurgeReport as one JSON line.
 */
import { MikroORM } from '@mikro-orm/core';
import { SagaOperations } from '../../src/operations/index.js';
import { ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { ormOptions, parseDialect } from './orm-options.js';

const [dialectArg, location, cutoff, batchSize] = process.argv.slice(2);
const dialect = parseDialect(dialectArg);
if (!dialect || !location || !cutoff || !(Number(batchSize) > 0)) {
  console.error('usage: purge-process.ts <postgresql|sqlite|better-sqlite> <location> <cutoff ISO> <batch size>');
  process.exit(2);
}
const orm = await MikroORM.init(ormOptions(dialect, location, [ScriptedSaga]));
const ops = new SagaOperations({ em: orm.em, sagas: [scriptedSaga] });
const before = new Date(cutoff);
const report = await ops.purge({ dispatchedBefore: before, completedSagasBefore: before, batchSize: Number(batchSize) });
process.stdout.write(`${JSON.stringify(report)}\n`);
await orm.close(true);
