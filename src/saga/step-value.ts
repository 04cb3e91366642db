import { COLUMN_LIMITS } from '../entities/dispatch-states.js';
import { SagaValidationError } from '../errors.js';
import { exceedsCodePoints, textProblem } from './stored-text.js';

/**
 * Checks the saga's step (the `stepProperty` value after a step ran) before the unit of work uses it: it is a
 * parameter of the step-change delete, and it is written to `saga_timer.step` (at most
 * {@link COLUMN_LIMITS}.step characters) when `storedOnTimer`.
 * @throws SagaValidationError `STEP_INVALID`, before anything is written.
 */
export function checkStepValue(step: string | null, storedOnTimer: boolean, sagaType: string, sagaId: string): void {
  if (step === null) return;
  const problem =
    textProblem(step) ??
    (storedOnTimer && exceedsCodePoints(step, COLUMN_LIMITS.step) ? `is longer than ${COLUMN_LIMITS.step} characters` : undefined);
  if (problem === undefined) return;
  throw new SagaValidationError(
    'STEP_INVALID',
    `Saga ${sagaType}/${sagaId}: its step (stepProperty) ${problem}, so step-scoped timers cannot record it: use step names of 1 to ${COLUMN_LIMITS.step} characters without U+0000 or lone surrogates.`,
    { sagaType, sagaId },
  );
}
