// The demo's scenarios (seed 004) end as the article says, on every database, with timers firing through
// the dispatcher.
import { describe, expect, it } from 'vitest';
import { OrderSagaState } from '../../examples/order-saga/order-saga.js';
import {
  captureReplyLost,
  carrierStaysDown,
  happyPathThenDuplicate,
  lateCaptureRefundFails,
  paymentRacesTimeout,
} from '../../examples/order-saga/scenarios.js';
import { DIALECTS } from '../support/databases.js';
import { useDatabase } from '../support/suite.js';

for (const dialect of DIALECTS) {
  describe(`order saga demo (${dialect})`, () => {
    const db = useDatabase(dialect, [OrderSagaState]);

    it('A: happy path, then a duplicate PaymentCaptured is ignored', async () => {
      const run = await happyPathThenDuplicate(db().orm);
      expect(run.final).toBe('final: Completed, version 3');
      expect(run.lines).toContain('  [saga] PaymentCaptured: CapturingPayment -> CreatingShipment => MarkOrderPaid, CreateShipment');
      expect(run.lines).toContain('  [saga] PaymentCaptured in Completed: ignored');
    });

    it('B: the payment timeout fires, the saga asks instead of compensating, and completes', async () => {
      const run = await captureReplyLost(db().orm);
      expect(run.final).toBe('final: Completed, version 4');
      expect(run.lines).toContain('  [saga] SagaTimedOut: CapturingPayment -> CheckingPayment => CheckPaymentStatus');
    });

    it('C: a late capture after cancellation is refunded; the refund fails and operations are alerted', async () => {
      const run = await lateCaptureRefundFails(db().orm);
      expect(run.final).toBe('final: Failed, version 6');
      expect(run.lines).toContain('  [saga] PaymentCaptured: Cancelled -> Refunding => RefundPayment');
      expect(run.lines).toContain('  [ops] ALERT: Refund failed: card account closed');
    });

    it('D: the payment timeout loses the race, retries on fresh state and is dropped', async () => {
      const run = await paymentRacesTimeout(db().orm);
      expect(run.final).toBe('final: CreatingShipment, version 2');
      expect(run.lines).toContain('  both handlers loaded version 1, step CapturingPayment');
      expect(run.lines).toContain('  [saga] SagaTimedOut in CreatingShipment: ignored');
      expect(run.lines.some((l) => l.includes('lost the race: 1 concurrency conflict, retried on fresh state, timer stale'))).toBe(true);
    });

    it('E: three shipment timeouts, then the saga fails and alerts a human', async () => {
      const run = await carrierStaysDown(db().orm);
      expect(run.final).toBe('final: Failed, version 5');
      expect(run.lines.filter((l) => l === '  [saga] SagaTimedOut: CreatingShipment -> CreatingShipment => CreateShipment')).toHaveLength(
        2,
      );
      expect(run.lines).toContain('  [saga] SagaTimedOut: CreatingShipment -> Failed => AlertOperations');
    });
  });
}
