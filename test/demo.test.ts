// The demo's scenarios (seed 004) end as the article says, on every database.
import { describe, expect, it } from 'vitest';
import { OrderSagaState } from '../examples/order-saga/order-saga.js';
import { happyPathThenDuplicate, paymentRacesTimeout } from '../examples/order-saga/scenarios.js';
import { DIALECTS } from './support/databases.js';
import { useDatabase } from './support/suite.js';

for (const dialect of DIALECTS) {
  describe(`order saga demo (${dialect})`, () => {
    const db = useDatabase(dialect, [OrderSagaState]);

    it('A: happy path, then a duplicate PaymentCaptured is ignored', async () => {
      const run = await happyPathThenDuplicate(db().orm);
      expect(run.final).toBe('final: Completed, version 3');
      expect(run.lines).toContain('  [saga] PaymentCaptured: CapturingPayment -> CreatingShipment => MarkOrderPaid, CreateShipment');
      expect(run.lines).toContain('  [saga] PaymentCaptured in Completed: ignored');
    });

    it('D: the payment timeout loses the race, retries on fresh state and is ignored', async () => {
      const run = await paymentRacesTimeout(db().orm);
      expect(run.final).toBe('final: CreatingShipment, version 2');
      expect(run.lines).toContain('  both handlers loaded version 1, step CapturingPayment');
      expect(run.lines).toContain('  [saga] SagaTimedOut in CreatingShipment: ignored');
      expect(run.lines.some((l) => l.includes('lost the race: 1 concurrency conflict'))).toBe(true);
    });
  });
}
