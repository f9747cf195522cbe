declare module 'wasi:cli/terminal-output@0.2.12' {
  
  export class TerminalOutput implements Disposable {
    /**
     * This type does not have a public constructor.
     */
    private constructor();
    [Symbol.dispose](): void;
  }
}
