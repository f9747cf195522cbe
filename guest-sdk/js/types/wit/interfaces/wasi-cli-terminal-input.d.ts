declare module 'wasi:cli/terminal-input@0.2.12' {
  
  export class TerminalInput implements Disposable {
    /**
     * This type does not have a public constructor.
     */
    private constructor();
    [Symbol.dispose](): void;
  }
}
