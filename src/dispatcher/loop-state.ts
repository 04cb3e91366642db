/** What the loop learns when a pass it waits for has delivered every row and only writes their published stamps. */
export const STAMPS_LEFT = Symbol('stamps left');

/** What the loop keeps between passes. */
export interface LoopState {
  /** The passes not yet settled (the current one, and those overtaken). */
  readonly inFlight: Set<Promise<unknown>>;
  /** The pass whose published stamps are being written while the current one runs. */
  stampsBehind: Promise<unknown> | undefined;
  /** Passes failed in a row. */
  failures: number;
  /** Whether the next pass claims every table: the last one found nothing in those it claimed. */
  claimAll: boolean;
  /** Whether the loop waits after a pass that found nothing. */
  waiting: boolean;
  /** Whether 'drained' was emitted during this wait. */
  drained: boolean;
}
