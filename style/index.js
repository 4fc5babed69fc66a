import './base.css';
import './merged.css';
